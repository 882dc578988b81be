package windowing_test

import (
	"testing"

	"aggregator/internal/windowing"
)

// BenchmarkCount: count windows of 10 records, and of 10 every 5, on the
// stream of BenchmarkTumbling (1,000 keys, 10 records per key per second),
// against its tumbling 1s windows (10 records each).
func BenchmarkCount(b *testing.B) {
	run := func(b *testing.B, e windowEngine) {
		s := newBenchStream(1000, 10)
		for s.i/s.perMs < 1100 {
			s.feedTo(e)
		}
		b.ReportAllocs()
		cpu := cpuTime()
		for b.Loop() {
			s.feedTo(e)
		}
		reportPerRecord(b)
		b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/record")
	}
	b.Run("tumbling 1s", func(b *testing.B) {
		run(b, benchEngine(b, params{"tumbling", 1000, 0, 0, 0, "on_watermark"}))
	})
	for _, c := range []struct {
		name        string
		size, slide int64
	}{{"count 10", 10, 0}, {"count 10 every 5", 10, 5}} {
		b.Run(c.name, func(b *testing.B) {
			e, err := windowing.NewCounts(windowing.Spec{Kind: windowing.KindCount, Size: c.size, Slide: c.slide, Aggregates: sumCount}, discard{})
			if err != nil {
				b.Fatal(err)
			}
			run(b, e)
		})
	}
}
