package windowing_test

import (
	"fmt"
	"runtime"
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// benchStream is a pre-decoded stream: record i has key i % keys and event
// time i / perMs ms, so every key gets perMs*window/keys records per window.
// Times are set in the loop (one store) so the stream can run forever.
type benchStream struct {
	recs  []record.Record
	perMs int64
}

func newBenchStream(keys int, perMs int64) *benchStream {
	values := []record.Value{record.Number(3), {}} // sum input, count slot: shared, the engine only reads them
	s := &benchStream{recs: make([]record.Record, keys), perMs: perMs}
	for i := range s.recs {
		key, fields := textKey(fmt.Sprintf("sid_%d", i))
		s.recs[i] = record.Record{Offset: int64(i), Key: key, KeyFields: fields, Values: values}
	}
	return s
}

// run feeds one record per b.Loop iteration and advances the watermark
// after each, as a bounded generator (out-of-orderness 0) would.
func (s *benchStream) run(b *testing.B, e *windowing.Engine) {
	b.ReportAllocs()
	i := int64(0)
	for b.Loop() {
		r := &s.recs[i%int64(len(s.recs))]
		r.Time = i / s.perMs
		r.Offset = i
		e.Add(r)
		e.Advance(r.Time - 1)
		i++
	}
	reportPerRecord(b)
}

func reportPerRecord(b *testing.B) {
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(ns, "ns/record")
	b.ReportMetric(1e9/ns, "records/s")
}

func benchEngine(b *testing.B, p params) *windowing.Engine {
	e, err := windowing.NewEngine(p.spec(sumCount...), discard{})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// BenchmarkMapIncrement is the floor: a bare map[string]int64 increment
// over the same records.
func BenchmarkMapIncrement(b *testing.B) {
	for _, keys := range []int{1000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			s := newBenchStream(keys, 10*int64(keys)/1000)
			m := map[string]int64{}
			b.ReportAllocs()
			i := int64(0)
			for b.Loop() {
				r := &s.recs[i%int64(len(s.recs))]
				r.Time = i / s.perMs
				m[r.Key]++
				i++
			}
			reportPerRecord(b)
		})
	}
}

func BenchmarkTumbling(b *testing.B) {
	for _, keys := range []int{1000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			// 10 records/ms, 1s windows: 10 records per key per window with 1k keys.
			s := newBenchStream(keys, 10*int64(keys)/1000)
			s.run(b, benchEngine(b, params{"tumbling", 1000, 0, 0, 0, "on_watermark"}))
		})
	}
}

// BenchmarkSliding keeps the slide (1s) and the stream of the 1k-key
// tumbling benchmark and grows the window to size/slide = ratio.
func BenchmarkSliding(b *testing.B) {
	for _, ratio := range []int64{2, 60, 120} {
		b.Run(fmt.Sprintf("size/slide=%d", ratio), func(b *testing.B) {
			s := newBenchStream(1000, 10)
			s.run(b, benchEngine(b, params{"sliding", ratio * 1000, 1000, 0, 0, "on_watermark"}))
		})
	}
}

// BenchmarkStateMemory measures heap bytes per open (key, window) for
// count+sum: 100k keys with one tumbling window each (every per-key cost
// included), and with 60 sliding windows each.
func BenchmarkStateMemory(b *testing.B) {
	for _, p := range []params{{"tumbling", 1000, 0, 0, 0, "on_watermark"}, {"sliding", 60_000, 1000, 0, 0, "on_watermark"}} {
		b.Run(p.typ, func(b *testing.B) {
			s := newBenchStream(100_000, 1)
			for b.Loop() {
				e := benchEngine(b, p)
				before := heapInUse()
				for i := range s.recs {
					s.recs[i].Time = 0
					e.Add(&s.recs[i])
				}
				after := heapInUse()
				b.ReportMetric(float64(after-before)/float64(e.OpenWindows()), "bytes/window")
				runtime.KeepAlive(e)
			}
		})
	}
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
