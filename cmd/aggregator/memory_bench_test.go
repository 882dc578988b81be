package main

import (
	"fmt"
	"runtime"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
)

// BenchmarkMemoryPerWindow measures the heap a service holds per open
// (key, window), the figure README's "Memory" sizes a pod's memory limit
// with: JSON records through the whole per-record path (decoder, watermark,
// engine), one record per key and window, nothing fired. Tumbling windows
// carry every per-key cost (one window per key); sliding(60) windows share
// a key's cost over 60. Run with -benchtime 1x: each iteration is one fill.
//
//	go test ./cmd/aggregator -run X -bench MemoryPerWindow -benchtime 1x
func BenchmarkMemoryPerWindow(b *testing.B) {
	aggregates := map[string]string{
		"count+sum+avg":   "[{name: n, fn: count}, {name: s, fn: sum, field: d}, {name: a, fn: avg, field: d}]",
		"quantile":        "[{name: p99, fn: quantile, field: d, q: 0.99}]",
		"count+sum+avg+q": "[{name: n, fn: count}, {name: s, fn: sum, field: d}, {name: a, fn: avg, field: d}, {name: p99, fn: quantile, field: d, q: 0.99}]",
	}
	windows := []struct {
		name, yaml string
		keys       int
		times      []int64 // event times, ms: one record per key at each
	}{
		{"tumbling", "{type: tumbling, size: 1m}", 100_000, []int64{0}},
		// 20 values per key and window: a quantile's sketch grows with the
		// spread of its values (here 100 to 999), the others do not.
		{"tumbling, 20 records", "{type: tumbling, size: 1m}", 20_000, make([]int64, 20)},
		// One record per second for a minute: 60 slices, 60 windows per key.
		{"sliding(60)", "{type: sliding, size: 1m, slide: 1s}", 10_000, seconds(60)},
	}
	for _, w := range windows {
		for _, name := range []string{"count+sum+avg", "quantile", "count+sum+avg+q"} {
			b.Run(w.name+"/"+name, func(b *testing.B) {
				cfg, err := config.Parse(fmt.Appendf(nil, `
source: {key: [sid], timestamp: {field: t, layout: unix_ms}}
watermark: {max_out_of_orderness: 1h}  # nothing fires: every window stays open
window: %s
aggregates: %s
`, w.yaml, aggregates[name]), nil)
				if err != nil {
					b.Fatal(err)
				}
				values := make([][]byte, 0, w.keys*len(w.times))
				for j, t := range w.times {
					for k := range w.keys {
						values = append(values, fmt.Appendf(nil, `{"sid":"sid_%d","t":%d,"d":%d}`, k, t, 100+(7*k+131*j)%900))
					}
				}
				for b.Loop() {
					p, err := pipeline.New(cfg, pipeline.Mode{})
					if err != nil {
						b.Fatal(err)
					}
					p.Assign(0, 0)
					before := heapAlloc()
					for i, v := range values {
						p.Process(&ready.Input{Offset: int64(i), Value: v}, 0)
						p.Step() // the outputs, written by a shell
					}
					after := heapAlloc()
					b.ReportMetric(float64(after-before)/float64(p.OpenWindows()), "bytes/window")
					b.ReportMetric(float64(after-before)/float64(w.keys), "bytes/key")
					runtime.KeepAlive(p)
				}
			})
		}
	}
}

func seconds(n int) []int64 {
	ts := make([]int64, n)
	for i := range ts {
		ts[i] = int64(i) * 1000
	}
	return ts
}

func heapAlloc() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
