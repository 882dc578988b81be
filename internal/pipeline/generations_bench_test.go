package pipeline_test

import (
	"fmt"
	"math"
	"testing"

	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
)

// BenchmarkGenerationsOverlap: a record through the window stage of a
// partition with one generation (10-second tumbling windows, count and
// sum), and through the same after a cut-over from a generation of
// 1-hour windows and a count only, whose window spans the whole stream
// (so every record goes to both: the overlap at its most, the old
// generation decoding each record again under its own aggregates).
// 1,000 keys, a record a ms, decoded as the core does (Process), outputs
// taken after each record.
func BenchmarkGenerationsOverlap(b *testing.B) {
	const keys = 1000
	old := genConfig("1", "{type: tumbling, size: 1h, allowed_lateness: 0s}", "[{name: n, fn: count}]")
	next := genConfig("2", "{type: tumbling, size: 10s, allowed_lateness: 0s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}]")
	const t0 = 3_600_000 * 100 // an hour's start
	for _, gens := range []int{1, 2} {
		b.Run(fmt.Sprintf("generations=%d", gens), func(b *testing.B) {
			p, _ := newProcessor(b, next)
			p.Assign(0, 0)
			if gens == 2 {
				first, _ := newProcessor(b, old)
				first.Assign(0, 0)
				first.Process(&ready.Input{Value: []byte(fmt.Sprintf(`{"k":"k0","t":%d,"v":1}`, t0))}, math.MaxInt64)
				log := changelog{}
				data, positions := first.Checkpoint()
				log.write(data)
				log.write(positions)
				p, _ = newProcessor(b, next)
				p.Assign(0, 0)
				if _, err := p.Restore(0, log.restorer(b, 0), 0); err != nil {
					b.Fatal(err)
				}
				if rep := p.GenerationReport(0); rep.Live != 2 {
					b.Fatalf("after the cut-over: %+v, want two live generations", rep)
				}
			}
			vals := make([][]byte, keys*10)
			for i := range vals {
				vals[i] = []byte(fmt.Sprintf(`{"k":"k%d","t":%d,"v":%d}`, i%keys, t0+1000+int64(i), i%7))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%len(vals) == 0 && i > 0 {
					b.StopTimer() // the stream goes on: times move on by a pass
					off := int64(i)
					for j := range vals {
						vals[j] = []byte(fmt.Sprintf(`{"k":"k%d","t":%d,"v":%d}`, j%keys, t0+1000+off+int64(j), j%7))
					}
					b.StartTimer()
				}
				in := ready.Input{Offset: int64(i + 1), Value: vals[i%len(vals)]}
				if out := p.Process(&in, math.MaxInt64); out != pipeline.Aggregated && out != pipeline.PartiallyLate {
					b.Fatalf("record %d: %v", i, out)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/record")
		})
	}
}
