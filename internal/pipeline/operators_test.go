package pipeline

import (
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
	for _, perPartition := range []bool{false, true} {
		o, err := newOperators(session, nopSink{}, perPartition, false)
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
	o, err := newOperators(tumbling, nopSink{}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	bridge(&o, 0)
	if got := o.takeMerges(); got != 0 {
		t.Errorf("tumbling windows: takeMerges() = %d, want 0", got)
	}
}
