package recompute_test

import (
	"fmt"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/ready"
	"aggregator/internal/recompute"
)

// TestOneStatePerKey: with watermark.scope global a key's records in two
// partitions are one window (count 2), which fires once both partitions
// passed its end (a partition without records yet holds the watermark
// back); with scope partition each partition has its own (two of count 1).
func TestOneStatePerKey(t *testing.T) {
	tests := map[string]struct {
		scope  string
		counts []int64
	}{
		"global":    {"global", []int64{2}},
		"partition": {"partition", []int64{1, 1}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Parse(fmt.Appendf(nil, `
source: {key: [sid], partitioning: by_key, timestamp: {field: t, layout: unix_ms}}
watermark: {max_out_of_orderness: 0s, scope: %s}
window: {type: tumbling, size: 5s}
aggregates: [{name: n, fn: count}]
`, tt.scope), nil)
			if err != nil {
				t.Fatal(err)
			}
			eng, err := recompute.New(cfg, nil, []int32{0, 1})
			if err != nil {
				t.Fatal(err)
			}
			var counts []int64
			for i, r := range []struct {
				p int32
				t int64
			}{{0, 1000}, {0, 7000}, {1, 2000}, {1, 8000}} {
				in := ready.Input{Partition: r.p, KafkaPartition: r.p, Offset: int64(i), Value: fmt.Appendf(nil, `{"sid":"a","t":%d}`, r.t)}
				rd, err := eng.Process(t.Context(), &in)
				if err != nil {
					t.Fatal(err)
				}
				for _, out := range rd.Outputs {
					if out.Kind == ready.Result && out.Result.Window.Start == 0 {
						counts = append(counts, out.Result.Count)
					}
				}
				if i == 1 && tt.scope == "global" && len(counts) > 0 {
					t.Errorf("window [0s, 5s) fired before partition 1 had a record: %v", counts)
				}
			}
			if fmt.Sprint(counts) != fmt.Sprint(tt.counts) {
				t.Errorf("window [0s, 5s) fired with counts %v, want %v", counts, tt.counts)
			}
		})
	}
}
