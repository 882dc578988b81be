package integration

import (
	"testing"
)

// TestRepartitionThreeInstances: P = 3 instances over 6 input partitions
// (and 6 repartition partitions: 4 partitions apiece), the input of
// TestRepartitionMatchesReplay (keyed by request id, the last partition's
// producer 20 s behind, stragglers behind their own partition), give the
// results, late events and dead letters of replay --kcat, in both
// delivery modes.
func TestRepartitionThreeInstances(t *testing.T) {
	const parts = 6
	first, second := repartitionInputN(parts, 900)
	for _, delivery := range []string{"exactly_once", "at_least_once"} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			kc := newCluster(t, parts)
			brokers := kc.ListenAddrs()
			cfg := parseConfig(t, repartitionYaml+"delivery: "+delivery+"\n", brokers)
			want := replayKcatN(t, cfg, parts, first, second)
			if len(want.late) != len(second) || len(want.dead) == 0 || len(want.results) == 0 {
				t.Fatalf("replay gives %d results, %d late events, %d dead letters: the test tests nothing", len(want.results), len(want.late), len(want.dead))
			}
			var svcs []*service
			for range 3 {
				svcs = append(svcs, start(t, cfg, nil))
			}
			waitEven(t, brokers, cfg.Source.Group, 3, 2*parts/3) // each stage's partitions split over the three
			produceSliced(t, brokers, cfg.Source.Group, first)
			waitCount(t, brokers, resultsTopic, int64(len(want.results)))
			produceKeyed(t, brokers, second)
			waitCount(t, brokers, lateTopic, int64(len(want.late)))
			for _, s := range svcs {
				s.stop(t)
			}
			compareReplay(t, brokers, delivery, want)
			t.Logf("%s, 3 instances: %d results, %d late events, %d dead letters as replay --kcat", delivery, len(want.results), len(want.late), len(want.dead))
		})
	}
}
