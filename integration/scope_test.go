package integration

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// by_key with watermark.scope partition on the real clients: 4 partitions
// keyed by the Kafka key, partition 3's producer 20 s behind in event time,
// and records of every partition 4–10 s behind their own partition (late
// against their own partition's watermark). Each partition's windows follow
// its own watermark, so its outputs depend on its records alone: 1 and 2
// instances, fed the whole stream in one burst, and 1 instance joined by a
// second half-way (two partitions move with their changelog), give the
// results, late events and dead letters of replay --kcat with the same
// config, and the lagging partition holds no other partition's windows
// back.

const scopeYaml = `
source:
  format: json
  key: ["$key"]
  partitioning: by_key
  timestamp: {field: t, layout: unix_ms}
watermark: {max_out_of_orderness: 1s, scope: partition}
window: {type: tumbling, size: 5s, allowed_lateness: 2s}
aggregates:
  - {name: total, fn: sum, field: d}
  - {name: calls, fn: count}
`

// scopeInput is the stream (each partition's keys its own, a few
// malformed records) and records an hour behind, produced once the
// stream's results are out: late on every partition.
func scopeInput() (first, second []keyedInput) {
	n := 1200
	if raceEnabled {
		n = 400
	}
	rng := rand.New(rand.NewPCG(23, 8))
	for i := range n {
		p := int32(rng.IntN(4))
		t := int64(base) + int64(i)*25
		switch {
		case p == 3:
			t -= 20_000 // a lagging producer
		case i%23 == 0:
			t -= 4_000 + rng.Int64N(6_000) // behind its own partition: late there
		}
		v := fmt.Sprintf(`{"t":%d,"d":%d}`, t, i%10)
		if i%97 == 0 {
			v = `{"t":"soon","d":1}`
		}
		first = append(first, keyedInput{p, fmt.Sprintf("p%d-u%d", p, rng.IntN(6)), v})
	}
	for i := range 4 {
		second = append(second, keyedInput{int32(i), fmt.Sprintf("p%d-u0", i), fmt.Sprintf(`{"t":%d,"d":1}`, int64(base)-3_600_000)})
	}
	return first, second
}

func TestScopePartitionInstances(t *testing.T) {
	t.Parallel()
	first, second := scopeInput()
	// With scope global, partition 3 holds every window back and the
	// stragglers are not late: the input tells the scopes apart.
	global := parseConfig(t, scopeYaml, []string{"127.0.0.1:9"})
	global.Watermark.Scope = "global"
	if g, p := replayKcat(t, global, first, second), replayKcat(t, parseConfig(t, scopeYaml, []string{"127.0.0.1:9"}), first, second); len(g.late) >= len(p.late) {
		t.Fatalf("scope global: %d late events, scope partition %d; want fewer with global", len(g.late), len(p.late))
	}
	for _, run := range []struct {
		name      string
		instances int
		rescale   bool // one instance for the first half of the stream, then a second joins
	}{{"1", 1, false}, {"2", 2, false}, {"1_then_2", 1, true}} {
		t.Run(run.name, func(t *testing.T) {
			t.Parallel() // its own broker
			kc := newCluster(t, 4)
			brokers := kc.ListenAddrs()
			cfg := parseConfig(t, scopeYaml, brokers)
			if cfg.Watermark.GlobalScope() || !cfg.Source.ByKey() {
				t.Fatalf("config: scope %q, partitioning %q; want partition, by_key", cfg.Watermark.Scope, cfg.Source.Partitioning)
			}
			want := replayKcat(t, cfg, first, second)
			stragglers := len(want.late) - len(second) // of partitions 0-2: partition 3's records come in order
			if stragglers <= 0 || len(want.dead) == 0 || len(want.results) == 0 {
				t.Fatalf("replay gives %d results, %d late stragglers of partitions 0-2, %d dead letters: the test tests nothing",
					len(want.results), stragglers, len(want.dead))
			}
			var svcs []*service
			for range run.instances {
				svcs = append(svcs, start(t, cfg, nil))
			}
			if run.instances == 2 {
				waitEven(t, brokers, cfg.Source.Group, 2, 2)
			}
			// In bursts: the outcome depends on no interleaving. The
			// second phase is late: it adds no result.
			rest := first
			if run.rescale {
				half := first[:len(first)/2]
				produceKeyed(t, brokers, half)
				ends := map[int32]int64{}
				for _, in := range half {
					ends[in.partition]++
				}
				durWaitCommitted(t, brokers, cfg.Source.Group, ends)
				svcs = append(svcs, start(t, cfg, nil)) // two partitions move, with their changelog
				waitEven(t, brokers, cfg.Source.Group, 2, 2)
				rest = first[len(half):]
			}
			produceKeyed(t, brokers, rest)
			waitCount(t, brokers, resultsTopic, int64(len(want.results)))
			produceKeyed(t, brokers, second)
			waitCount(t, brokers, lateTopic, int64(len(want.late)))
			for _, s := range svcs {
				s.stop(t)
			}
			compareReplay(t, brokers, "exactly_once", want)
		})
	}
}
