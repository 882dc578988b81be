package windowing_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// topKValues are 1,000 distinct page names drawn with a Zipf skew (a few
// common, most rare), 4,096 draws cycled through: every 5,000-record
// window of a key holds all of them.
func topKValues() []record.Value {
	names := make([]record.Value, 1000)
	for i := range names {
		names[i] = record.Text(fmt.Sprintf("/page/%03d", i))
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 10, 999)
	out := make([]record.Value, 4096)
	for i := range out {
		out[i] = names[i%1000] // every name at least once per cycle...
		if i >= 1000 {
			out[i] = names[z.Uint64()] // ...then skewed
		}
	}
	return out
}

// BenchmarkTopK: top_k with k = 10 over 1,000 distinct values per window
// (10 keys, 1s tumbling windows of 5,000 records each), firing included.
// bytes/window is the heap a window's top_k state holds, measured once on
// 100 windows filled alike.
func BenchmarkTopK(b *testing.B) {
	aggs := []windowing.Aggregate{{Fn: windowing.FnTopK, K: 10}, {Fn: windowing.FnCount}}
	spec := params{"tumbling", 1000, 0, 0, 0, "on_watermark"}.spec(aggs...)
	vals := topKValues()
	const keys, perMs = 10, 50
	recs := make([]record.Record, keys)
	for i := range recs {
		key, fields := textKey(fmt.Sprintf("sid_%d", i))
		recs[i] = record.Record{Key: key, KeyFields: fields, Values: make([]record.Value, 2)}
	}
	e, err := windowing.NewEngine(spec, discard{})
	if err != nil {
		b.Fatal(err)
	}
	i := int64(0)
	feed := func() {
		r := &recs[i%keys]
		r.Time, r.Offset = i/perMs, i
		r.Values[0] = vals[(i/keys)&4095]
		e.Add(r)
		e.Advance(r.Time - 1)
		i++
	}
	for i/perMs < 2000 {
		feed()
	}
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		feed()
	}
	reportPerRecord(b)
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/record")
	b.ReportMetric(topKBytesPerWindow(b, spec, vals), "bytes/window")
}

// topKBytesPerWindow fills 100 keys' windows with 5,000 records each (all
// 1,000 values) and returns the heap they hold, per window.
func topKBytesPerWindow(b *testing.B, spec windowing.Spec, vals []record.Value) float64 {
	const windows = 100
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e, err := windowing.NewEngine(spec, discard{})
	if err != nil {
		b.Fatal(err)
	}
	for k := range windows {
		key, fields := textKey(fmt.Sprintf("sid_%d", k))
		r := &record.Record{Key: key, KeyFields: fields, Values: make([]record.Value, 2)}
		for j := range 5000 {
			r.Time, r.Values[0] = int64(j%1000), vals[j&4095]
			e.Add(r)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(e)
	if e.OpenWindows() != windows {
		b.Fatalf("OpenWindows() = %d, want %d", e.OpenWindows(), windows)
	}
	return float64(after.HeapAlloc-before.HeapAlloc) / windows
}
