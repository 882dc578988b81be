package windowing_test

import (
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// generationPair feeds every record and watermark to the operators of two
// generations, as a partition's core does during an overlap (docs/changing-config.md#a-record-in-two-generations).
type generationPair struct{ old, new windowing.Operator }

func (p generationPair) Add(rec *record.Record) windowing.AddResult {
	p.old.Add(rec)
	return p.new.Add(rec)
}

func (p generationPair) Advance(wm int64) {
	p.old.Advance(wm)
	p.new.Advance(wm)
}

// BenchmarkGenerations is BenchmarkTumbling's stream (1k keys, 1 s
// windows) through one generation, and through two after a cut-over at
// the end of the warm-up: the old one (1 s windows) takes no record from
// then on and retires once its last window drops, the new one (2 s
// windows) takes them all. The old generation's cost per record is the
// pair's less the new one's alone.
func BenchmarkGenerations(b *testing.B) {
	old := params{"tumbling", 1000, 0, 0, 0, "on_watermark"}
	next := params{"tumbling", 2000, 0, 0, 0, "on_watermark"}
	b.Run("one", func(b *testing.B) {
		s := newBenchStream(1000, 10)
		s.runOp(b, benchOperator(b, next.spec(sumCount...)), 1100, nil)
	})
	b.Run("two", func(b *testing.B) {
		s := newBenchStream(1000, 10)
		o := benchOperator(b, old.spec(sumCount...))
		s.runOp(b, o, 1100, func() windowEngine {
			spec := next.spec(sumCount...)
			T := spec.CutoverStart(s.maxTs + 1)
			o.CutOver(T)
			spec.From, spec.FromSet = T, true
			n := benchOperator(b, spec)
			n.Advance(s.maxTs - 1)
			return generationPair{old: o, new: n}
		})
	})
}

func benchOperator(b *testing.B, spec windowing.Spec) windowing.Operator {
	op, err := windowing.New(spec, discard{})
	if err != nil {
		b.Fatal(err)
	}
	return op
}

// runOp is run for any operator: after warmMs of event time, cut (if not
// nil) gives what the timed loop feeds.
func (s *benchStream) runOp(b *testing.B, e windowEngine, warmMs int64, cut func() windowEngine) {
	for s.i/s.perMs < warmMs {
		s.feedTo(e)
	}
	if cut != nil {
		e = cut()
	}
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		s.feedTo(e)
	}
	reportPerRecord(b)
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/record")
}
