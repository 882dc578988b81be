package windowing_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/windowing"
)

// op is one step of a Flink WindowOperatorTest case: a record (key, value,
// time, and its own gap if not 0) or, with key "", a watermark at t.
type op struct {
	key string
	v   float64
	t   int64
	gap int64
}

func el(key string, v float64, t int64) op { return op{key: key, v: v, t: t} }

func wm(t int64) op { return op{t: t} }

// flinkRun feeds ops to a session engine (gap, lateness; sum and count)
// and returns what it emitted as Flink's SessionWindowFunction writes it
// ("key2-6 [0,5500)"), retractions ("retract key2 [0,5500)") and late
// events ("late key2 @10000"), each as a sorted multiset.
func flinkRun(t *testing.T, gap, lateness int64, ops []op) (results, retracts, late []string) {
	t.Helper()
	spec := windowing.Spec{Kind: windowing.KindSession, Gap: gap, Lateness: lateness,
		Aggregates: []windowing.Aggregate{{Fn: windowing.FnSum}, {Fn: windowing.FnCount}}}
	c := &collector{}
	e, err := windowing.NewSessions(spec, c)
	if err != nil {
		t.Fatal(err)
	}
	e.TrackChanges()
	for i, o := range ops {
		if o.key == "" {
			e.Advance(o.t)
			continue
		}
		key, fields := textKey(o.key)
		r := rec(0, int64(i), key, fields, o.t, o.v)
		r.Gap = o.gap
		if out := e.Add(r); out.Kind == windowing.LateEvent {
			late = append(late, fmt.Sprintf("late %s @%d", o.key, o.t))
		}
	}
	for _, r := range c.got {
		k := r.Key[len(`{"k":"`) : len(r.Key)-2]
		if r.Firing == windowing.Retract {
			retracts = append(retracts, fmt.Sprintf("retract %s [%d,%d)", k, r.Window.Start, r.Window.End))
			continue
		}
		results = append(results, fmt.Sprintf("%s-%v [%d,%d)", k, r.Aggregates[0].Num, r.Window.Start, r.Window.End))
	}
	slices.Sort(results)
	slices.Sort(retracts)
	slices.Sort(late)
	return results, retracts, late
}

func checkFlink(t *testing.T, gap, lateness int64, ops []op, results, retracts, late []string) {
	t.Helper()
	gotRes, gotRet, gotLate := flinkRun(t, gap, lateness, ops)
	slices.Sort(results)
	slices.Sort(retracts)
	slices.Sort(late)
	if !slices.Equal(gotRes, results) {
		t.Errorf("results = %q, want %q", gotRes, results)
	}
	if !slices.Equal(gotRet, retracts) {
		t.Errorf("retractions = %q, want %q", gotRet, retracts)
	}
	if !slices.Equal(gotLate, late) {
		t.Errorf("late events = %q, want %q", gotLate, late)
	}
}

// TestFlinkSessionWindows is WindowOperatorTest.testSessionWindows and
// testReduceSessionWindows (the same stream; our sum is the reduce): gap
// 3s, no lateness, records out of order within sessions.
func TestFlinkSessionWindows(t *testing.T) {
	ops := []op{
		el("key2", 1, 0), el("key2", 2, 1000), el("key2", 3, 2500),
		el("key1", 1, 10), el("key1", 2, 1000),
		// (Flink snapshots and restores here; see the restore tests)
		el("key1", 3, 2500),
		el("key2", 4, 5501), el("key2", 5, 6000), el("key2", 5, 6000), el("key2", 6, 6050),
		wm(12000),
		el("key2", 10, 15000), el("key2", 20, 15000),
		wm(17999),
	}
	checkFlink(t, 3000, 0, ops,
		[]string{"key1-6 [10,5500)", "key2-6 [0,5500)", "key2-20 [5501,9050)", "key2-30 [15000,18000)"}, nil, nil)
}

// The lateness cases share one stream: gap 3s, a key2 session that bridges
// two sessions, one that fires, then a record at 10000 after the watermark
// passed 14600.
var latenessOps = []op{
	el("key2", 1, 1000), wm(1999),
	el("key2", 1, 2000), wm(4998),
	el("key2", 1, 4500),           // not late: the merged session's maxTimestamp is after the watermark
	el("key2", 1, 8500), wm(7400), // a new session
	el("key2", 1, 7000), wm(11501), // bridges the two
	el("key2", 1, 11600), wm(14600), // a new session, fires
	el("key2", 1, 10000),
	el("key2", 1, 14500), wm(20000),
	wm(100000),
}

// TestFlinkSideOutputDueToLatenessSessionZeroLateness: with no lateness,
// the record at 10000 finds no session (both were dropped) and its own
// window is past cleanup: a late event.
func TestFlinkSideOutputDueToLatenessSessionZeroLateness(t *testing.T) {
	checkFlink(t, 3000, 0, latenessOps,
		[]string{"key2-5 [1000,11500)", "key2-1 [11600,14600)", "key2-1 [14500,17500)"}, nil,
		[]string{"late key2 @10000"})
}

// TestFlinkNotSideOutputDueToLatenessSessionWithLateness: 10ms lateness
// keeps [11600,14600) until 14609, so the record at 10000 merges with it
// into [10000,14600), due already: a late firing, and [11600,14600) is
// retracted (Flink emits no retraction). 14500 then extends that session
// to [10000,17500), retracted in turn.
func TestFlinkNotSideOutputDueToLatenessSessionWithLateness(t *testing.T) {
	checkFlink(t, 3000, 10, latenessOps,
		[]string{"key2-5 [1000,11500)", "key2-1 [11600,14600)", "key2-2 [10000,14600)", "key2-3 [10000,17500)"},
		[]string{"retract key2 [11600,14600)", "retract key2 [10000,14600)"}, nil)
}

// TestFlinkNotSideOutputDueToLatenessSessionWithHugeLateness: with 10s
// lateness the record at 10000 bridges [1000,11500) and [11600,14600),
// both fired: both are retracted and [1000,14600) fires late.
func TestFlinkNotSideOutputDueToLatenessSessionWithHugeLateness(t *testing.T) {
	checkFlink(t, 3000, 10000, latenessOps,
		[]string{"key2-5 [1000,11500)", "key2-1 [11600,14600)", "key2-7 [1000,14600)", "key2-8 [1000,17500)"},
		[]string{"retract key2 [1000,11500)", "retract key2 [11600,14600)", "retract key2 [1000,14600)"}, nil)
}

// TestFlinkCleanupTimerWithEmptyReduceStateForSessionWindows: a session
// fires at its maxTimestamp and is dropped at its cleanup time, after
// which nothing more is emitted and no state is left.
func TestFlinkCleanupTimerWithEmptyReduceStateForSessionWindows(t *testing.T) {
	spec := windowing.Spec{Kind: windowing.KindSession, Gap: 3000, Lateness: 10,
		Aggregates: []windowing.Aggregate{{Fn: windowing.FnSum}, {Fn: windowing.FnCount}}}
	c := &collector{}
	e, err := windowing.NewSessions(spec, c)
	if err != nil {
		t.Fatal(err)
	}
	key, fields := textKey("key2")
	e.Add(rec(0, 0, key, fields, 1000, 1))
	e.Advance(4008) // Flink's step is 4998; we look in between, before cleanup at 4009
	if got := briefs(c.got); !slices.Equal(got, []brief{{key, 1000, 1, 1, windowing.OnTime, 0, 4008}}) {
		t.Errorf("at 4008: %v, want key2-1 [1000,4000) on time", got)
	}
	if n := e.OpenWindows(); n != 1 {
		t.Errorf("OpenWindows() before cleanup (4009) = %d, want 1", n)
	}
	e.Advance(4998)
	e.Advance(14600)
	if n := e.OpenWindows(); n != 0 || len(c.got) != 1 {
		t.Errorf("after 4998 and 14600: OpenWindows() = %d, results %v; want 0 and nothing new", n, briefs(c.got))
	}
}

// TestFlinkDynamicEventTimeSessionWindows: gaps per record (key1: 3s; key2:
// 1s for value 10, else 2s). A short gap inside a session does not shrink
// it; one that reaches past it extends it.
func TestFlinkDynamicEventTimeSessionWindows(t *testing.T) {
	g := func(key string, v float64, ts int64) op {
		o := el(key, v, ts)
		switch {
		case key == "key1":
			o.gap = 3000
		case v == 10:
			o.gap = 1000
		default:
			o.gap = 2000
		}
		return o
	}
	ops := []op{
		g("key1", 3, 10), g("key2", 4, 5000), g("key2", 5, 6000), wm(8999),
		g("key2", 1, 9000), g("key2", 2, 10000), g("key2", 10, 10500), wm(12999),
		g("key2", 10, 13000), g("key2", 10, 13500), g("key2", 1, 14000), wm(16999),
	}
	checkFlink(t, 60_000, 0, ops,
		[]string{"key1-3 [10,3010)", "key2-9 [5000,8000)", "key2-13 [9000,12000)", "key2-21 [13000,16000)"}, nil, nil)
}

// TestRestoreAcrossWindowKinds: a changelog of sessions does not restore
// into tumbling windows, nor one of tumbling windows into sessions: the
// error says the window changed.
func TestRestoreAcrossWindowKinds(t *testing.T) {
	key, _ := textKey("k")
	id := "\x02k\x00\x00" + key
	sess, _ := windowing.NewSessions(windowing.Spec{Kind: windowing.KindSession, Gap: 10, Aggregates: sumCount}, &collector{})
	slice := windowing.Entry{Kind: windowing.SliceEntry, ID: id, Split: 4, Start: 0, Count: 1, Nums: []float64{1}}
	if err := sess.Restore(&slice, math.MinInt64); err == nil || !strings.Contains(err.Error(), "window changed") {
		t.Errorf("Sessions.Restore(slice) = %v, want an error saying the window changed", err)
	}
	tumbling, _ := windowing.NewEngine(params{"tumbling", 10, 0, 0, 0, "on_watermark"}.spec(sumCount...), &collector{})
	session := windowing.Entry{Kind: windowing.SessionEntry, ID: id, Split: 4, Start: 0, End: 10, Count: 1, Nums: []float64{1}}
	if err := tumbling.Restore(&session, math.MinInt64); err == nil || !strings.Contains(err.Error(), "window changed") {
		t.Errorf("Engine.Restore(session) = %v, want an error saying the window changed", err)
	}
}
