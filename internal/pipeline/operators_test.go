package pipeline

import (
	"math"
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

type nopSink struct{}

func (nopSink) Emit(*windowing.Result) {}

// TestTakeMerges: takeMerges hands out the records that bridged sessions
// since the last call, summed over the operators of both shapes, and 0
// for windows that do not merge.
func TestTakeMerges(t *testing.T) {
	session := windowing.Spec{Kind: windowing.KindSession, Gap: 10, Lateness: 100, Aggregates: []windowing.Aggregate{{Fn: windowing.FnCount}}}
	add := func(o *operators, part int32, ts int64) {
		t.Helper()
		key := record.Text("a")
		rec := &record.Record{Partition: part, Time: ts, Key: `{"k":` + key.Raw + `}`, KeyFields: []record.Value{key}, Values: []record.Value{{}}}
		if out := o.at(part).Add(rec); out.Kind != windowing.Aggregated {
			t.Fatalf("Add(p%d t=%d) = %+v", part, ts, out)
		}
	}
	// Sessions [0, 10) and [18, 28) of a key, then a record at 10 that
	// bridges them: one merge per partition.
	bridge := func(o *operators, part int32) {
		add(o, part, 0)
		add(o, part, 18)
		add(o, part, 10)
	}
	for _, shape := range []lists{oneList, ownWatermark, mergedWatermark} {
		perPartition := shape != oneList
		o, err := newOperators(session, nopSink{}, shape, false)
		if err != nil {
			t.Fatal(err)
		}
		bridge(&o, 0)
		bridge(&o, 1)
		if got := o.takeMerges(); got != 2 {
			t.Errorf("perPartition %v: takeMerges() = %d, want 2", perPartition, got)
		}
		if got := o.takeMerges(); got != 0 {
			t.Errorf("perPartition %v: takeMerges() again = %d, want 0", perPartition, got)
		}
		add(&o, 1, 40)
		add(&o, 1, 58)
		add(&o, 1, 50)
		if got := o.takeMerges(); got != 1 {
			t.Errorf("perPartition %v: takeMerges() after one more bridge = %d, want 1", perPartition, got)
		}
	}
	tumbling := windowing.Spec{Kind: windowing.KindTumbling, Size: 10, Aggregates: []windowing.Aggregate{{Fn: windowing.FnCount}}}
	o, err := newOperators(tumbling, nopSink{}, ownWatermark, false)
	if err != nil {
		t.Fatal(err)
	}
	bridge(&o, 0)
	if got := o.takeMerges(); got != 0 {
		t.Errorf("tumbling windows: takeMerges() = %d, want 0", got)
	}
}

// TestOperatorLists: a state partition's windows are a list of
// operators (one per config generation, next): a watermark reaches every
// operator of the list, each visits them all, merges are summed over
// them, and a revoked partition's list goes whole; with the shared shape
// the list is every partition's.
func TestOperatorLists(t *testing.T) {
	session := windowing.Spec{Kind: windowing.KindSession, Gap: 10, Lateness: 100, Aggregates: []windowing.Aggregate{{Fn: windowing.FnCount}}}
	for _, shape := range []lists{oneList, ownWatermark} {
		perPartition := shape != oneList
		o, err := newOperators(session, nopSink{}, shape, false)
		if err != nil {
			t.Fatal(err)
		}
		o.start(0)
		second := o.make()[0]
		if perPartition {
			o.per[0] = append(o.per[0], second)
		} else {
			o.shared = append(o.shared, second)
		}
		o.advance(0, 500)
		n := 0
		o.each(func(op windowing.Operator) {
			n++
			if op.Watermark() != 500 {
				t.Errorf("perPartition %v: an operator of the list at watermark %d, want 500", perPartition, op.Watermark())
			}
		})
		if n != 2 {
			t.Errorf("perPartition %v: each visits %d operators, want 2", perPartition, n)
		}
		for _, l := range []windowing.Operator{o.at(0), second.op} {
			key := record.Text("a")
			for _, ts := range []int64{600, 618, 610} {
				l.Add(&record.Record{Partition: 0, Time: ts, Key: `{"k":` + key.Raw + `}`, KeyFields: []record.Value{key}, Values: []record.Value{{}}})
			}
		}
		if got := o.takeMerges(); got != 2 {
			t.Errorf("perPartition %v: takeMerges() = %d, want 2 (one per operator of the list)", perPartition, got)
		}
		o.remove(0)
		if perPartition && o.of(0) != nil {
			t.Errorf("after remove(0): partition 0 has a list of %d, want none", len(o.of(0)))
		}
		if !perPartition && o.openWindows() != 0 {
			t.Errorf("shared: after remove(0), %d open windows, want none", o.openWindows())
		}
	}
}

// TestMergedLists: with mergedWatermark every partition has a list of
// its own (one generation or several), all following the merged
// watermark: it reaches them all, once (a watermark not above the last
// one is not handed out), a list made then starts at it, and a revoked
// partition's list goes whole.
func TestMergedLists(t *testing.T) {
	session := windowing.Spec{Kind: windowing.KindSession, Gap: 10, Lateness: 100, Aggregates: []windowing.Aggregate{{Fn: windowing.FnCount}}}
	o, err := newOperators(session, nopSink{}, mergedWatermark, false)
	if err != nil {
		t.Fatal(err)
	}
	o.start(0)
	o.start(1)
	o.advanceMerged(300)
	own := append(o.make(), o.make()...)
	o.set(1, own)
	if o.shared != nil || o.at(0) != o.of(0)[0].op || o.current(1) != own[0].op {
		t.Fatalf("partition 0 is not its own list's, or 1 not the list it was given")
	}
	for _, s := range own {
		if s.op.Watermark() != 300 {
			t.Errorf("a list made at watermark 300 starts at %d", s.op.Watermark())
		}
	}
	o.advanceMerged(500)
	o.advanceMerged(400)
	n := 0
	o.each(func(op windowing.Operator) {
		n++
		if op.Watermark() != 500 {
			t.Errorf("an operator at watermark %d, want 500", op.Watermark())
		}
	})
	if n != 3 || o.watermark() != 500 {
		t.Errorf("each visits %d operators at watermark %d, want 3 at 500", n, o.watermark())
	}
	o.remove(1)
	if o.of(1) != nil {
		t.Errorf("after remove(1): partition 1 has a list of %d, want none", len(o.of(1)))
	}
	o.reset()
	if o.wm != math.MinInt64 || o.of(0) != nil || o.at(0).Watermark() != math.MinInt64 {
		t.Errorf("after reset: watermark %d, list of 0 %v, want minus infinity and a fresh list", o.wm, o.of(0))
	}
}
