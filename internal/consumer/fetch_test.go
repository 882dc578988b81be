package consumer

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/record"
)

func testConfig(t *testing.T) config.Config {
	t.Helper()
	yaml := `
source: {brokers: [localhost:9092], topics: [calls], group: g, format: json, key: [sid], timestamp: {field: t, layout: unix_ms}}
window: {type: tumbling, size: 5s}
aggregates: [{name: calls, fn: count}]
sink: {results_topic: out}
delivery: at_least_once
`
	cfg, err := config.Parse([]byte(yaml), func(string) string { return "" })
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	return cfg
}

// Decoding workers split a poll at any record, across partition
// boundaries: each record lands in its slot with its partition's engine id.
func TestPollDecodeSplitsAcrossPartitions(t *testing.T) {
	cfg := testConfig(t)
	cfg.Source.Partitioning = "by_key" // an input partition's id is its engine id
	tests := map[string]struct {
		sizes   []int // records per partition
		workers int
	}{
		"one worker":              {[]int{3, 5, 1}, 1},
		"chunk ends in partition": {[]int{300, 500, 100}, 2},
		"more workers than parts": {[]int{1000}, 3},
		"chunk ends at boundary":  {[]int{256, 256}, 2},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			core, err := pipeline.NewCore(pipeline.Spec{Config: cfg, Partitions: []int32{int32(len(tt.sizes))}})
			if err != nil {
				t.Fatal(err)
			}
			p := &poll{core: core}
			for range tt.workers {
				dec, err := record.NewDecoder(cfg.RecordSpec(), nil)
				if err != nil {
					t.Fatal(err)
				}
				p.decs = append(p.decs, dec)
			}
			n := 0
			for part, size := range tt.sizes {
				var recs []*kgo.Record
				for off := range size {
					recs = append(recs, &kgo.Record{Topic: "calls", Partition: int32(part), Offset: int64(off),
						Value: fmt.Appendf(nil, `{"sid":"s%d","t":%d}`, part, 1000*off)})
				}
				p.parts = append(p.parts, polledPart{id: int32(100 + part), lo: n, hi: n + size, records: recs})
				n += size
			}
			p.recs = make([]pipeline.Decoded, n)
			p.decode()
			p.decoding.Wait()
			for _, pp := range p.parts {
				for i := pp.lo; i < pp.hi; i++ {
					d, want := &p.recs[i], pp.records[i-pp.lo]
					if d.Err != nil || d.In.Partition != pp.id || d.In.Offset != want.Offset || d.Rec.Time != 1000*want.Offset {
						t.Errorf("recs[%d] = partition %d offset %d time %d err %v, want partition %d offset %d time %d",
							i, d.In.Partition, d.In.Offset, d.Rec.Time, d.Err, pp.id, want.Offset, 1000*want.Offset)
					}
				}
			}
		})
	}
}
