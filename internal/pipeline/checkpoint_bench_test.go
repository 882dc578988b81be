package pipeline_test

import (
	"fmt"
	"math"
	"testing"

	"aggregator/internal/ready"
)

// BenchmarkCheckpoint: one commit's changelog records after every one of
// 1,000 keys took a record (one window changed per key, one partition):
// the cost and garbage of encoding the window state a commit writes.
func BenchmarkCheckpoint(b *testing.B) {
	const keys = 1000
	p, _ := newProcessor(b, `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
window: {type: tumbling, size: 60s}
aggregates: [{name: n, fn: count}, {name: s, fn: sum, field: v}, {name: a, fn: avg, field: v}]
`)
	p.Assign(0, 0)
	ins := make([]ready.Input, keys)
	for k := range ins {
		ins[k] = ready.Input{Value: []byte(fmt.Sprintf(`{"k": "key-%04d", "t": 1000, "v": %d}`, k, k))}
	}
	b.ReportAllocs()
	records := 0
	for i := 0; b.Loop(); i++ {
		for k := range ins {
			ins[k].Offset = int64(i*keys + k)
			p.Process(&ins[k], math.MaxInt64)
		}
		data, positions := p.Checkpoint()
		records += len(data) + len(positions)
	}
	b.ReportMetric(float64(records)/float64(b.N), "records/op")
}
