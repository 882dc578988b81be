package integration

import (
	"slices"
	"testing"
)

// The golden examples (docs/semantics.md#tumbling-windows-with-allowed-lateness)
// through Kafka give what replay gives: the
// windows that closed and the late events, headers included.
func TestGoldenThroughKafka(t *testing.T) {
	t.Parallel() // its own broker
	lines := readLines(t, "../cmd/aggregator/testdata/000_calls.csv")
	for _, name := range []string{"lateness_0s", "lateness_2s"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // its own broker
			kc := newCluster(t, 1)
			brokers := kc.ListenAddrs()
			cfg := readConfig(t, "../cmd/aggregator/testdata/"+name+".yaml", brokers)
			want := replay(t, cfg, onePartition(lines), noWallClock)
			if len(want.results) == 0 || len(want.late) == 0 {
				t.Fatalf("reference run gave %d results and %d late events, want some of each", len(want.results), len(want.late))
			}
			produce(t, brokers, lines, func(int) int32 { return 0 })
			s := start(t, cfg, nil)
			waitCount(t, brokers, resultsTopic, int64(len(want.results)))
			waitCount(t, brokers, lateTopic, int64(len(want.late)))
			s.stop(t)
			if got := values(readAll(t, brokers, resultsTopic)); !slices.Equal(got, want.results) {
				t.Errorf("results topic =\n%q\nwant\n%q", got, want.results)
			}
			if got := events(readAll(t, brokers, lateTopic)); !slices.Equal(got, want.late) {
				t.Errorf("late topic =\n%q\nwant\n%q", got, want.late)
			}
		})
	}
}
