package windowing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// model is a naive engine that a window operator must match: reference
// (tumbling, sliding, calendar), sessionRef and countRef.
type model interface {
	Add(rec *record.Record) windowing.AddResult
	Advance(wm int64)
	ProcessingTime(now int64)
	RemovePartition(p int32)
	// results returns every result so far, in emission order.
	results() []windowing.Result
	// openWindows returns how many windows are open, if the model counts
	// them as the operator does.
	openWindows() (int, bool)
}

func (r *reference) results() []windowing.Result  { return r.out }
func (r *reference) openWindows() (int, bool)     { return len(r.wins), true }
func (r *sessionRef) results() []windowing.Result { return r.out }
func (r *sessionRef) openWindows() (int, bool)    { return r.open(), true }
func (r *countRef) results() []windowing.Result   { return r.out }
func (r *countRef) openWindows() (int, bool)      { return 0, false }

// stream is one random stream that the property harness drives through
// an operator made from spec and through its model, step by step: records,
// watermark advances, processing-time ticks (with processing-time early
// firings), changelog commits, crashes (the operator replaced by a fresh
// one restored from the changelog at the same watermark) and removed
// partitions. After every step the operator must have emitted what the
// model did, hold as many open windows, and keep its invariants.
type stream struct {
	name string // for messages: the seed and what else tells streams apart
	spec windowing.Spec
	ref  model
	rng  *rand.Rand
	gen  *streamGen
	// The steps' shares, in thousandths: a record below add, a tick below
	// tick, a commit below commit, a crash below crash, else a partition
	// removed.
	add, tick, commit, crash int
	// record makes the next record (nil: gen.record); watermark the next
	// watermark (nil: up to 7 behind the latest time); show prints a time.
	record    func() *record.Record
	watermark func() int64
	show      func(ms int64) string
}

// tally is what a stream exercised.
type tally struct {
	outcomes [3]int                        // by Outcome
	restored [windowing.CountEntry + 1]int // entries restored by the crashes, by EntryKind
	results  []windowing.Result
}

func (s *stream) run(t *testing.T, steps int) tally {
	t.Helper()
	var tl tally
	got := &collector{}
	e := newOperator(t, s.spec, got)
	store := newChangelog()
	early := s.spec.Early
	now := int64(math.MinInt64) // the processing-time clock, once it starts
	show := s.show
	if show == nil {
		show = func(ms int64) string { return fmt.Sprint(ms) }
	}
	checked := 0
	for step := range steps {
		what := ""
		switch r := s.rng.IntN(1000); {
		case r < s.add:
			var rec *record.Record
			if s.record != nil {
				rec = s.record()
			} else {
				rec = s.gen.record()
			}
			what = fmt.Sprintf("Add(p%d %s t=%s gap=%d)", rec.Partition, rec.Key, show(rec.Time), rec.Gap)
			o, want := e.Add(rec), s.ref.Add(rec)
			if o != want {
				t.Fatalf("%s: step %d: %s = %+v, want %+v", s.name, step, what, o, want)
			}
			tl.outcomes[want.Kind]++
		case r < s.tick && early.Every > 0 && !early.Event && s.rng.IntN(2) == 0:
			now = max(now, -50) + s.rng.Int64N(2*early.Every)
			what = fmt.Sprintf("ProcessingTime(%d)", now)
			e.ProcessingTime(now)
			s.ref.ProcessingTime(now)
		case r < s.tick:
			var wm int64
			if s.watermark != nil {
				wm = s.watermark()
			} else {
				s.gen.wm = max(s.gen.wm, s.gen.maxTs-s.rng.Int64N(8))
				wm = s.gen.wm
			}
			what = fmt.Sprintf("Advance(%s)", show(wm))
			e.Advance(wm)
			s.ref.Advance(wm)
		case r < s.commit:
			n, err := store.commit(e)
			if err != nil {
				t.Fatalf("%s: step %d: commit: %v", s.name, step, err)
			}
			what = fmt.Sprintf("commit (%d entries)", n)
		case r < s.crash:
			e = crashOperator(t, fmt.Sprintf("%s: step %d", s.name, step), e, s.spec, got, store, s.rng)
			for _, en := range store.entries {
				tl.restored[en.Kind]++
			}
			if now != math.MinInt64 {
				e.ProcessingTime(now) // the restarted service sees the clock: where ticks count from
			}
			what = fmt.Sprintf("crash at W=%d (%d entries restored)", e.Watermark(), len(store.entries))
		default:
			part := s.rng.Int32N(3)
			what = fmt.Sprintf("RemovePartition(%d)", part)
			e.RemovePartition(part)
			s.ref.RemovePartition(part)
			store.dropPartition(part)
		}
		checked = checkOperator(t, fmt.Sprintf("%s: step %d %s", s.name, step, what), e, s.ref, s.spec.Aggregates, got.got, checked)
	}
	e.Advance(math.MaxInt64)
	s.ref.Advance(math.MaxInt64)
	checkOperator(t, s.name+": flush", e, s.ref, s.spec.Aggregates, got.got, checked)
	tl.results = got.got
	return tl
}

// crashOperator commits e's changes to store and returns a fresh operator
// of spec with e's sink, advanced to e's watermark, restored from store
// (in an order shuffled by rng) and done restoring. Restored at the same
// watermark, it must hand out no changes: nothing changed.
func crashOperator(t *testing.T, at string, e windowing.Operator, spec windowing.Spec, sink windowing.Sink, store *changelog, rng *rand.Rand) windowing.Operator {
	t.Helper()
	if _, err := store.commit(e); err != nil {
		t.Fatalf("%s: crash: commit: %v", at, err)
	}
	r := newOperator(t, spec, sink)
	r.Advance(e.Watermark()) // a no-op at math.MinInt64
	if err := store.restore(r, rng); err != nil {
		t.Fatalf("%s: crash: %v", at, err)
	}
	r.FinishRestore()
	var changed []entryID
	r.Changes(func(en *windowing.Entry) { changed = append(changed, idOf(en)) })
	if len(changed) > 0 {
		t.Fatalf("%s: crash: Changes after restoring %d entries at the same watermark handed out %v, want nothing", at, len(store.entries), changed)
	}
	return r
}

// checkOperator requires e to have emitted the results ref did (those
// from checked on are new since the last check), to hold the open windows
// ref does if ref counts them, and to keep its invariants. It returns how
// many results are checked.
func checkOperator(t *testing.T, at string, e windowing.Operator, ref model, aggs []windowing.Aggregate, got []windowing.Result, checked int) int {
	t.Helper()
	want := ref.results()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d\ngot  %v\nwant %v", at, len(got), len(want), got, want)
	}
	for i := checked; i < len(got); i++ {
		if err := sameResult(got[i], want[i], aggs); err != nil {
			t.Fatalf("%s: result %d: %v\ngot  %+v\nwant %+v", at, i, err, got[i], want[i])
		}
	}
	if want, ok := ref.openWindows(); ok {
		if n := e.OpenWindows(); n != want {
			t.Fatalf("%s: OpenWindows() = %d, want %d", at, n, want)
		}
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s: %v", at, r)
			}
		}()
		windowing.CheckInvariants(e)
	}()
	return len(got)
}
