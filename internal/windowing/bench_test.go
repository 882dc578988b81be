package windowing_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// benchStream is a pre-decoded stream: record i has key i % keys and event
// time i / perMs ms, moved back by delays[i % len(delays)] if there are
// delays, so every key gets perMs*window/keys records per window. Times
// are set as records are fed (one store) so the stream can run forever.
type benchStream struct {
	recs   []record.Record
	perMs  int64
	delays []int64 // len a power of 2; nil for in order
	ooo    int64   // the watermark's out-of-orderness, ms
	i      int64   // records fed
	maxTs  int64
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

// feed adds the next record and advances the watermark after it, as a
// bounded generator with out-of-orderness s.ooo would.
func (s *benchStream) feed(e *windowing.Engine) { s.feedTo(e) }

// feedTo is feed for any engine.
func (s *benchStream) feedTo(e windowEngine) {
	r := &s.recs[s.i%int64(len(s.recs))]
	r.Time = s.i / s.perMs
	if s.delays != nil {
		r.Time -= s.delays[s.i&int64(len(s.delays)-1)]
	}
	r.Offset = s.i
	e.Add(r)
	s.maxTs = max(s.maxTs, r.Time)
	e.Advance(s.maxTs - s.ooo - 1)
	s.i++
}

// run feeds one record per b.Loop iteration, after warmMs of event time
// (untimed) that brings the engine to its steady state: every key with
// all its windows open.
func (s *benchStream) run(b *testing.B, e *windowing.Engine, warmMs int64) {
	for s.i/s.perMs < warmMs {
		s.feed(e)
	}
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		s.feed(e)
	}
	reportPerRecord(b)
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/record")
}

// cpuTime is the process's CPU time so far in ns: on a busy machine it
// swings less than the wall time b.Loop measures.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
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
			s.run(b, benchEngine(b, params{"tumbling", 1000, 0, 0, 0, "on_watermark"}), 1100)
		})
	}
}

// windowRatios are the size/slide ratios the sliding benchmarks run.
var windowRatios = []int64{2, 10, 60, 240}

// BenchmarkSliding keeps the slide (1s) and the stream of the 1k-key
// tumbling benchmark and grows the window to size/slide = ratio.
func BenchmarkSliding(b *testing.B) {
	for _, ratio := range windowRatios {
		b.Run(fmt.Sprintf("size/slide=%d", ratio), func(b *testing.B) {
			s := newBenchStream(1000, 10)
			s.run(b, benchEngine(b, params{"sliding", ratio * 1000, 1000, 0, 0, "on_watermark"}), (ratio+1)*1000)
		})
	}
}

// disorder is how far behind the stream's clock records arrive.
type disorder struct {
	name string
	// uniform moves every record back by up to this many ms (uniformly);
	// tailPerMille of the records are tailMs back instead.
	uniform, tailPerMille, tailMs int64
}

// disorders are the disordered inputs of the benchmarks: uniform 0-1.5s,
// and the same with a heavy tail, 1% of the records 30s back.
var disorders = []disorder{
	{name: "uniform", uniform: 1500},
	{name: "tail", uniform: 1500, tailPerMille: 10, tailMs: 30_000},
}

// delays returns 1<<16 seeded delays drawn from d.
func (d disorder) delays() []int64 {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]int64, 1<<16)
	for i := range out {
		out[i] = r.Int64N(d.uniform + 1)
		if r.Int64N(1000) < d.tailPerMille {
			out[i] = d.tailMs
		}
	}
	return out
}

// BenchmarkDisordered runs the 1k-key stream of BenchmarkTumbling with
// records moved back in event time, as the disorders say, a bounded
// watermark with 2s out-of-orderness and 1s allowed lateness, for tumbling
// 1s windows and sliding windows of slide 1s and size/slide 2 to 240.
// The tail's records are late for the older windows they belong to, and
// fire the newest of those late.
func BenchmarkDisordered(b *testing.B) {
	windows := []params{{"tumbling", 1000, 0, 0, 1000, "on_watermark"}}
	for _, ratio := range windowRatios {
		windows = append(windows, params{"sliding", ratio * 1000, 1000, 0, 1000, "on_watermark"})
	}
	for _, d := range disorders {
		for _, p := range windows {
			name := p.typ
			if p.typ == "sliding" {
				name = fmt.Sprintf("sliding=%d", p.size/p.slide)
			}
			b.Run(d.name+"/"+name, func(b *testing.B) {
				s := newBenchStream(1000, 10)
				s.delays, s.ooo = d.delays(), 2000
				s.run(b, benchEngine(b, p), p.size+d.tailMs+5000)
			})
		}
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

// BenchmarkTumblingQuantile is BenchmarkTumbling with a p99 beside the sum
// and count: with 1k keys a window holds 10 values of a key (exact,
// docs/semantics.md#aggregates), with 10 keys 1000 (past 256: the sketch).
func BenchmarkTumblingQuantile(b *testing.B) {
	for _, keys := range []int{1000, 10} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			s := newBenchStream(keys, 10)
			values := []record.Value{record.Number(3), {}, record.Number(3)}
			for i := range s.recs {
				s.recs[i].Values = values
			}
			aggs := append(append([]windowing.Aggregate{}, sumCount...), windowing.Aggregate{Fn: windowing.FnQuantile, Q: 0.99})
			e, err := windowing.NewEngine(params{"tumbling", 1000, 0, 0, 0, "on_watermark"}.spec(aggs...), discard{})
			if err != nil {
				b.Fatal(err)
			}
			s.run(b, e, 1100)
		})
	}
}
