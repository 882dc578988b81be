package windowing_test

import (
	"fmt"
	"testing"

	"aggregator/internal/windowing"
)

// BenchmarkEarly: 1k keys, 100 records per key per second, without early
// firings and with event-time early firings every size/10, on tumbling 1s
// and sliding 10s/1s windows. perWindow=10 is BenchmarkTumbling's stream
// (10 records per key per 1s window), where nearly every record is
// followed by an early firing of its window: there the results cost.
func BenchmarkEarly(b *testing.B) {
	for _, perMs := range []int64{100, 10} {
		for _, c := range []struct {
			name  string
			p     params
			early int64
		}{
			{"tumbling/none", params{"tumbling", 1000, 0, 0, 0, "on_watermark"}, 0},
			{"tumbling/every size÷10", params{"tumbling", 1000, 0, 0, 0, "on_watermark"}, 100},
			{"sliding 10/none", params{"sliding", 10_000, 1000, 0, 0, "on_watermark"}, 0},
			{"sliding 10/every size÷10", params{"sliding", 10_000, 1000, 0, 0, "on_watermark"}, 1000},
		} {
			b.Run(fmt.Sprintf("per key per second=%d/%s", perMs, c.name), func(b *testing.B) {
				spec := c.p.spec(sumCount...)
				spec.Early = windowing.EarlySpec{Every: c.early, Event: true}
				e, err := windowing.NewEngine(spec, discard{})
				if err != nil {
					b.Fatal(err)
				}
				newBenchStream(1000, perMs).run(b, e, c.p.size+1000)
			})
		}
	}
}
