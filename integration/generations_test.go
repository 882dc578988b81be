package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/consumer"
	"aggregator/internal/producer"
)

// Changing the config of a running service (SPEC §11) on the real
// clients: a config runs over the first half of the stream and stops;
// the next config, with other state settings at a higher
// state.config_version, restores its changelog and reads the second
// half. Every result read (read_committed) is a window of the replay of
// its own generation's config (the header aggregator.config_version says
// which) over the whole stream, none twice; every window of the old
// config's replay that starts before the earliest partition's cut-over,
// and of the new config's from the latest, is there: no record is lost at
// the seam.

// genYAML is a config of these tests: partitioning and scope (by_key
// needs watermark.scope partition to cut over), the window, the
// aggregates and state.config_version.
func genYAML(partitioning, window, aggregates string, version int) string {
	scope := ""
	if partitioning == "by_key" {
		scope = ", scope: partition"
	}
	return fmt.Sprintf(`
source:
  format: json
  key: [sid]
  partitioning: %s
  timestamp: {field: t, layout: unix_ms}
watermark: {max_out_of_orderness: 1s%s}
window: %s
aggregates: %s
state: {config_version: %d}
`, partitioning, scope, window, aggregates, version)
}

// genResult is a result read from the results topic.
type genResult struct {
	value   string
	version int64
	start   int64
}

func readGenResults(t testing.TB, brokers []string) []genResult {
	t.Helper()
	var out []genResult
	for _, r := range readAll(t, brokers, resultsTopic) {
		g := genResult{value: watermarkField.ReplaceAllString(string(r.Value), ""), version: -1}
		for _, h := range r.Headers {
			if h.Key == producer.HeaderConfigVersion {
				g.version, _ = strconv.ParseInt(string(h.Value), 10, 64)
			}
		}
		var v struct {
			Start int64 `json:"window_start"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("result %s: %v", r.Value, err)
		}
		g.start = v.Start
		out = append(out, g)
	}
	return out
}

// cutovers are the cut-over times the instance with registry reg set
// (aggregator_cutover_timestamp_seconds), in ms, by changelog partition.
func cutovers(t testing.TB, reg *prometheus.Registry) map[string]int64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, mf := range mfs {
		if mf.GetName() != "aggregator_cutover_timestamp_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = int64(math.Round(m.GetGauge().GetValue() * 1000))
		}
	}
	return out
}

func TestConfigChangeRestart(t *testing.T) {
	t.Parallel()
	const parts = 4
	n := 1200
	if raceEnabled {
		n = 600
	}
	changes := []struct {
		name, partitioning string
		old, next          [2]string // window, aggregates
	}{
		{"by_key_1s_to_5s", "by_key", [2]string{"{type: tumbling, size: 1s, allowed_lateness: 2s}", "[{name: calls, fn: count}]"},
			[2]string{"{type: tumbling, size: 5s, allowed_lateness: 2s}", "[{name: calls, fn: count}]"}},
		{"repartition_added_aggregate", "repartition", [2]string{"{type: tumbling, size: 1s, allowed_lateness: 2s}", "[{name: calls, fn: count}]"},
			[2]string{"{type: tumbling, size: 5s, allowed_lateness: 2s}", "[{name: calls, fn: count}, {name: longest, fn: max, field: d}]"}},
	}
	for _, ch := range changes {
		t.Run(ch.name, func(t *testing.T) {
			t.Parallel() // its own broker
			first := genInput(parts, n)
			kc := newCluster(t, parts)
			brokers := kc.ListenAddrs()
			cfg1 := parseConfig(t, genYAML(ch.partitioning, ch.old[0], ch.old[1], 1), brokers)
			cfg2 := parseConfig(t, genYAML(ch.partitioning, ch.next[0], ch.next[1], 2), brokers)
			want1, want2 := replayKcatN(t, cfg1, parts, first, nil), replayKcatN(t, cfg2, parts, first, nil)
			// The firing watermark depends on how partitions interleave
			// (repartition): compared without it, as contents does.
			want1.results, want2.results = contents(want1.results), contents(want2.results)
			in1 := map[string]bool{}
			for _, v := range want1.results {
				in1[v] = true
			}
			in2 := map[string]bool{}
			for _, v := range want2.results {
				in2[v] = true
			}
			half := len(first) / 2
			s1 := start(t, cfg1, nil)
			produceSliced(t, brokers, cfg1.Source.Group, first[:half])
			s1.stop(t)

			reg := prometheus.NewRegistry()
			s2 := startWith(t, cfg2, nil, reg)
			produceSliced(t, brokers, cfg2.Source.Group, first[half:])
			var lo, hi int64
			waitFor(t, waitTimeout, "the cut-over of every state partition", func() bool {
				cs := cutovers(t, reg)
				lo, hi = math.MaxInt64, math.MinInt64
				for _, c := range cs {
					lo, hi = min(lo, c), max(hi, c)
				}
				return len(cs) == parts
			})
			// The windows each generation must have fired by the end of
			// the stream: the old one's before the earliest T, the new
			// one's from the latest.
			need := map[string]bool{}
			for _, v := range want1.results {
				if startOf(t, v) < lo {
					need[v] = true
				}
			}
			for _, v := range want2.results {
				if startOf(t, v) >= hi {
					need[v] = true
				}
			}
			if len(need) == 0 || lo == hi && lo == 0 {
				t.Fatalf("nothing to check: cut-overs %d to %d", lo, hi)
			}
			var got []genResult
			waitForf(t, waitTimeout, time.Second, func() bool {
				got = readGenResults(t, brokers)
				seen := map[string]bool{}
				for _, g := range got {
					if need[g.value] {
						seen[g.value] = true
					}
				}
				return len(seen) == len(need)
			}, func() string {
				have := map[string]bool{}
				for _, g := range got {
					have[g.value] = true
				}
				var missing []string
				for v := range need {
					if !have[v] && len(missing) < 5 {
						missing = append(missing, v)
					}
				}
				var other []string
				for _, g := range got {
					if !need[g.value] && len(other) < 5 {
						other = append(other, fmt.Sprintf("gen %d %s", g.version, g.value))
					}
				}
				return fmt.Sprintf("%d windows of the two replays in the results topic (cut-overs %d to %d; %d results; missing %q; others %q)", len(need), lo, hi, len(got), missing, other)
			})
			s2.stop(t)
			got = readGenResults(t, brokers)
			dup := map[string]bool{}
			gens := map[int64]int{}
			for _, g := range got {
				if dup[g.value] {
					t.Errorf("result %s read twice", g.value)
				}
				dup[g.value] = true
				gens[g.version]++
				switch {
				case g.version == 1 && !in1[g.value]:
					t.Errorf("generation 1's result %s is not a window of its config's replay", g.value)
				case g.version == 2 && !in2[g.value]:
					t.Errorf("generation 2's result %s is not a window of its config's replay", g.value)
				case g.version == 1 && g.start >= hi, g.version == 2 && g.start < lo:
					t.Errorf("generation %d's result %s is on the wrong side of the cut-overs %d to %d", g.version, g.value, lo, hi)
				case g.version != 1 && g.version != 2:
					t.Errorf("result %s has %s %d", g.value, producer.HeaderConfigVersion, g.version)
				}
			}
			if gens[1] == 0 || gens[2] == 0 {
				t.Errorf("results by generation: %v, want both", gens)
			}
		})
	}
}

// genInput is the stream of these tests: parts partitions in turn, each
// with keys of its own (by_key), 25 ms of event time a record, one in 31
// up to 800 ms behind (within max_out_of_orderness: whether a record is
// late does not depend on how the partitions interleave), one in 97
// malformed, and one record a partition 30 s after the stream's end, which
// moves every watermark past the stream's windows (its own does not fire).
func genInput(parts int32, n int) []keyedInput {
	rng := rand.New(rand.NewPCG(29, 3))
	var out []keyedInput
	for i := range n {
		p := int32(i) % parts
		t := int64(base) + int64(i)*25
		if i%31 == 0 {
			t -= rng.Int64N(800)
		}
		v := fmt.Sprintf(`{"sid":"p%d-u%d","t":%d,"d":%d}`, p, rng.IntN(4), t, rng.IntN(50))
		if i%97 == 0 {
			v = `{"sid":"u1","t":"soon","d":1}`
		}
		out = append(out, keyedInput{p, fmt.Sprintf("req-%d", i), v})
	}
	for p := range parts {
		out = append(out, keyedInput{p, "end", fmt.Sprintf(`{"sid":"p%d-u0","t":%d,"d":1}`, p, int64(base)+int64(n)*25+30_000)})
	}
	return out
}

// startOf is a result value's window_start.
func startOf(t testing.TB, value string) int64 {
	var v struct {
		Start int64 `json:"window_start"`
	}
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		t.Fatalf("result %s: %v", value, err)
	}
	return v.Start
}

// TestConfigChangeRefused: against the state of a running config, one
// with another window at the same state.config_version, or another
// source.key, exits 2 (a config error) naming the key, and writes
// nothing: the changelog and the results topic are as they were.
func TestConfigChangeRefused(t *testing.T) {
	t.Parallel()
	first := genInput(2, 200)
	kc := newCluster(t, 2)
	brokers := kc.ListenAddrs()
	old := genYAML("by_key", "{type: tumbling, size: 1s}", "[{name: calls, fn: count}]", 1)
	cfg := parseConfig(t, old, brokers)
	s := start(t, cfg, nil)
	produceSliced(t, brokers, cfg.Source.Group, first)
	s.stop(t)
	before := endOffsets(t, brokers, cfg.State.ChangelogTopic, resultsTopic)
	for _, c := range []struct{ name, yaml, key string }{
		{"equal version", genYAML("by_key", "{type: tumbling, size: 5s}", "[{name: calls, fn: count}]", 1), "state.config_version"},
		{"another key", genYAML("by_key", "{type: tumbling, size: 1s}", "[{name: calls, fn: count}]", 2), "source.key"},
	} {
		next := parseConfig(t, c.yaml, brokers)
		if c.key == "source.key" {
			next.Source.Key = []string{"d"}
		}
		svc, err := consumer.NewWithClock(next, zerolog.Nop(), prometheus.NewRegistry(), time.Now, kgo.FetchMaxWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		err = svc.Run(ctx)
		cancel()
		svc.Close()
		var ke *config.KeyError
		if !errors.As(err, &ke) || ke.Key != c.key || !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%s: Run = %v, want a config error (exit 2) naming %s", c.name, err, c.key)
		}
		if after := endOffsets(t, brokers, cfg.State.ChangelogTopic, resultsTopic); !maps2Equal(after, before) {
			t.Errorf("%s: end offsets %v after the refusal, want %v: nothing written", c.name, after, before)
		}
	}
}

// endOffsets are the end offsets of topics, by topic and partition.
func endOffsets(t testing.TB, brokers []string, topics ...string) map[string]int64 {
	t.Helper()
	ends, err := kadm.NewClient(client(t, brokers)).ListEndOffsets(context.Background(), topics...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[fmt.Sprintf("%s[%d]", o.Topic, o.Partition)] = o.Offset })
	return out
}

func maps2Equal(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
