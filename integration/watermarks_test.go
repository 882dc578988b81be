package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The watermark topic (source.partitioning by_key, watermark.scope
// global) on the real clients: input keyed by user over 4 partitions
// (every record of a user in one partition), partition 3's producer 20 s
// behind in event time, and 2% of every partition's records 4–10 s behind
// their own partition. Each instance's watermark is the minimum over all
// 4 partitions, the others' as they published them, so 1 and 2 instances
// give the results, late events and dead letters of replay --kcat over
// the same records. (With each instance's watermark over its own
// partitions, the instance without partition 3 judged the stragglers of
// its partitions against a watermark 20 s ahead, and ~110 more were late.)

const byUserYaml = `
source:
  format: json
  key: [sid]
  partitioning: by_key
  timestamp: {field: t, layout: unix_ms}
watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 5s, allowed_lateness: 2s}
aggregates:
  - {name: total, fn: sum, field: d}
  - {name: calls, fn: count}
`

// byUserInput is the first phase (the stream, with a few malformed
// records) and the second (records an hour behind, produced once the
// first phase's windows fired: late wherever they are judged). User u is
// on partition u%4. The first slice that produceSliced produces has no
// stragglers: until an instance has read the others' first values its
// watermark is minus infinity, and a straggler of partition 3 that replay
// calls late would be on time there.
func byUserInput() (first, second []keyedInput) {
	rng := rand.New(rand.NewPCG(17, 5))
	for i := range 1200 {
		u := rng.IntN(12)
		p := int32(u % 4)
		t := int64(base) + int64(i)*25
		if p == 3 {
			t -= 20_000 // a lagging producer
		}
		if i >= 200 && rng.IntN(50) == 0 {
			t -= 4_000 + rng.Int64N(6_000) // behind its own partition
		}
		v := fmt.Sprintf(`{"sid":"u%d","t":%d,"d":%d}`, u, t, i%10)
		if i%97 == 0 {
			v = fmt.Sprintf(`{"sid":"u%d","t":"soon","d":1}`, u)
		}
		first = append(first, keyedInput{p, fmt.Sprintf("u%d", u), v})
	}
	for i := range 6 {
		second = append(second, keyedInput{int32(i % 4), fmt.Sprintf("u%d", i), fmt.Sprintf(`{"sid":"u%d","t":%d,"d":1}`, i, int64(base)-3_600_000)})
	}
	return first, second
}

func TestWatermarkTopicMatchesReplay(t *testing.T) {
	t.Parallel()
	first, second := byUserInput()
	cases := []struct {
		delivery  string
		instances int
	}{{"exactly_once", 2}, {"at_least_once", 2}, {"exactly_once", 1}}
	if raceEnabled {
		cases = cases[:2] // ~10 s each there; one instance is what replay is anyway
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d", tc.delivery, tc.instances), func(t *testing.T) {
			t.Parallel() // its own broker
			kc := newCluster(t, 4)
			brokers := kc.ListenAddrs()
			cfg := parseConfig(t, byUserYaml+"delivery: "+tc.delivery+"\n", brokers)
			want := replayKcat(t, cfg, first, second)
			if len(want.late) <= len(second) || len(want.dead) == 0 || len(want.results) == 0 {
				t.Fatalf("replay gives %d results, %d late events, %d dead letters: the test tests nothing", len(want.results), len(want.late), len(want.dead))
			}
			var svcs []*service
			var regs []*prometheus.Registry
			for range tc.instances {
				reg := prometheus.NewRegistry()
				svcs, regs = append(svcs, startWith(t, cfg, nil, reg)), append(regs, reg)
			}
			if tc.instances == 2 {
				waitEven(t, brokers, cfg.Source.Group, 2, 2)
			}
			ends := map[int32]int64{}
			seen := map[int32]int64{}
			produceSlicedFrom(t, brokers, cfg.Source.Group, first[:200], ends, regs, seen)
			for _, reg := range regs {
				// Every instance knows every partition's watermark before a straggler comes.
				waitGauge(t, reg, "aggregator_sources_unreported", 0)
			}
			produceSlicedFrom(t, brokers, cfg.Source.Group, first[200:], ends, regs, seen)
			waitCount(t, brokers, resultsTopic, int64(len(want.results)))
			for _, reg := range regs {
				waitGauge(t, reg, "aggregator_watermark_source_partition", 3) // the lagging producer's, on every instance
			}
			produceKeyed(t, brokers, second)
			waitCount(t, brokers, lateTopic, int64(len(want.late)))
			for _, s := range svcs {
				s.stop(t)
			}
			compareReplay(t, brokers, tc.delivery, want)
			if n := len(readAll(t, brokers, cfg.State.WatermarkTopic)); n == 0 {
				t.Errorf("the watermark topic %s holds no record", cfg.State.WatermarkTopic)
			}
		})
	}
}

// produceSlicedFrom is produceSliced for records that follow others on
// the same partitions (ends: where each partition's records end so far,
// seen: the highest event time of each so far; both updated). After each
// slice it also waits until every instance (regs) knows each partition's
// watermark as of that slice: a straggler is then judged against the
// group's watermark as replay judges it, however late an instance reads
// the others' values.
func produceSlicedFrom(t testing.TB, brokers []string, group string, ins []keyedInput, ends map[int32]int64, regs []*prometheus.Registry, seen map[int32]int64) {
	t.Helper()
	const sliceRecords = 200 // 5 s of event time
	for lo := 0; lo < len(ins); lo += sliceRecords {
		slice := ins[lo:min(lo+sliceRecords, len(ins))]
		produceKeyed(t, brokers, slice)
		for _, in := range slice {
			ends[in.partition]++
			var v struct{ T any }
			if json.Unmarshal([]byte(in.value), &v) == nil {
				if ms, ok := v.T.(float64); ok {
					seen[in.partition] = max(seen[in.partition], int64(ms))
				}
			}
		}
		durWaitCommitted(t, brokers, group, ends)
		for i, reg := range regs {
			waitFor(t, waitTimeout, fmt.Sprintf("instance %d knows every partition's watermark", i), func() bool {
				got := sourceWatermarks(t, reg)
				for p, ms := range seen {
					if got[p] < float64(ms-1_001)/1000 { // max_out_of_orderness 1s
						return false
					}
				}
				return true
			})
		}
	}
}

// sourceWatermarks reads aggregator_source_watermark_seconds by partition.
func sourceWatermarks(t testing.TB, reg *prometheus.Registry) map[int32]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "aggregator_source_watermark_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "partition" {
					if p, err := strconv.Atoi(l.GetValue()); err == nil {
						got[int32(p)] = m.GetGauge().GetValue()
					}
				}
			}
		}
	}
	return got
}
