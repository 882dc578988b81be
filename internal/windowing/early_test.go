package windowing_test

import (
	"math"
	"slices"
	"testing"

	"aggregator/internal/windowing"
)

// step is one call on an engine: a record at t (add), an Advance to wm, or
// a processing-time tick at now.
type step struct {
	add  int64
	wm   int64
	now  int64
	kind byte // 'a', 'w' or 'p'
}

func add(t int64) step  { return step{add: t, kind: 'a'} }
func adv(wm int64) step { return step{wm: wm, kind: 'w'} }
func proc(n int64) step { return step{now: n, kind: 'p'} }
func flush() step       { return adv(math.MaxInt64) }

type earlyEngine interface {
	windowEngine
	ProcessingTime(now int64)
}

func runSteps(e earlyEngine, steps []step) {
	key, fields := textKey("k")
	for i, s := range steps {
		switch s.kind {
		case 'a':
			e.Add(rec(0, int64(i), key, fields, s.add, 1))
		case 'w':
			e.Advance(s.wm)
		case 'p':
			e.ProcessingTime(s.now)
		}
	}
}

// TestEarlyFirings: early firings worked by hand from docs/windows.md's rules.
// Event time with every 3: ticks are the W with W+1 a multiple of 3 (2, 5,
// 8, 11, …); the first watermark only sets where they count from.
func TestEarlyFirings(t *testing.T) {
	key, _ := textKey("k")
	tests := map[string]struct {
		spec  windowing.Spec
		steps []step
		want  []brief
	}{
		// [0,10): 2 records by the tick at 2 (early 0), one more by 5
		// (early 1), none by 8 (no firing: unchanged). At W=11 the tick at 11
		// comes after [0,10)'s maxTimestamp 9: on time first, then [10,20)
		// early. W 11 → 25 crosses 14, 17, 20, 23: [20,30) fires early at the
		// first (14), before [10,20) on time at its 19. W 25 → 29 crosses 26
		// and 29, which is [20,30)'s maxTimestamp: on time only.
		"event time, tumbling": {
			spec: withEarly(params{"tumbling", 10, 0, 0, 0, "on_watermark"}.spec(sumCount...), 3, true),
			steps: []step{add(1), adv(0), add(2), adv(1), adv(2), adv(4), add(4), adv(5), adv(7), adv(8),
				add(12), add(6), adv(11), add(13), add(21), adv(25), add(22), adv(29), flush()},
			want: []brief{
				{key, 0, 2, 2, windowing.Early, 0, 2},
				{key, 0, 3, 3, windowing.Early, 1, 5},
				{key, 0, 4, 4, windowing.OnTime, 2, 11},
				{key, 10, 1, 1, windowing.Early, 0, 11},
				{key, 20, 1, 1, windowing.Early, 0, 25},
				{key, 10, 2, 2, windowing.OnTime, 1, 25},
				{key, 20, 2, 2, windowing.OnTime, 1, 29},
			},
		},
		// Processing time, every 100: the first tick only sets where ticks
		// count from; 100 fires [0,10) early; 350 crosses 200 and 300 and
		// fires once; 360 crosses none; then on time and a late firing
		// (lateness 5) whose revisions go on counting.
		"processing time, tumbling": {
			spec:  withEarly(params{"tumbling", 10, 0, 0, 5, "on_watermark"}.spec(sumCount...), 100, false),
			steps: []step{proc(50), add(1), proc(99), proc(100), add(2), proc(350), proc(360), adv(9), add(3), proc(400), flush()},
			want: []brief{
				{key, 0, 1, 1, windowing.Early, 0, math.MinInt64},
				{key, 0, 2, 2, windowing.Early, 1, math.MinInt64},
				{key, 0, 2, 2, windowing.OnTime, 2, 9},
				{key, 0, 3, 3, windowing.Late, 3, 9},
			},
		},
		// on_close: early firings, then the one Final. At W=9 the window is
		// due (maxTimestamp 9): no early firing though it changed.
		"event time, on_close": {
			spec:  withEarly(params{"tumbling", 10, 0, 0, 5, "on_close"}.spec(sumCount...), 5, true),
			steps: []step{add(1), adv(0), adv(4), add(3), adv(9), add(5), adv(14)},
			want: []brief{
				{key, 0, 1, 1, windowing.Early, 0, 4},
				{key, 0, 3, 3, windowing.Final, 1, 14},
			},
		},
		// Sliding 10/5, every 5: at W=4, a tick, [-5,5) and [0,10) both
		// hold t=1 and 3; [-5,5) is due (maxTimestamp 4): on time only, and
		// first (due 4 = the tick, then by end); [0,10) fires early. t=6
		// changes [0,10) and [5,15) only; at W=9 [0,10) is due: on time,
		// and [5,15) fires early.
		"event time, sliding": {
			spec:  withEarly(params{"sliding", 10, 5, 0, 0, "on_watermark"}.spec(sumCount...), 5, true),
			steps: []step{add(1), adv(0), add(3), adv(4), add(6), adv(9), flush()},
			want: []brief{
				{key, -5, 2, 2, windowing.OnTime, 0, 4},
				{key, 0, 2, 2, windowing.Early, 0, 4},
				{key, 0, 3, 3, windowing.OnTime, 1, 9},
				{key, 5, 1, 1, windowing.Early, 0, 9},
				{key, 5, 1, 1, windowing.OnTime, 1, math.MaxInt64},
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			e, c := newEngine(t, tt.spec)
			runSteps(e, tt.steps)
			if got := briefs(c.got); !slices.Equal(got, tt.want) {
				t.Errorf("results =\n%v\nwant\n%v", got, tt.want)
			}
		})
	}
}

// TestEarlySessions: a session that fired early and then grows is a new
// window: its early result is retracted, and the grown session starts
// again at revision 0 (gap 5, every 10).
func TestEarlySessions(t *testing.T) {
	key, _ := textKey("k")
	c := &collector{}
	s := newSessions(t, withEarly(windowing.Spec{Kind: windowing.KindSession, Gap: 5, Aggregates: sumCount}, 10, true), c)
	runSteps(s, []step{add(1), adv(0), add(5), add(8), adv(9), add(11), adv(15), flush()})
	want := []brief{
		{key, 1, 3, 3, windowing.Early, 0, 9},
		{key, 1, 0, 0, windowing.Retract, 0, 9},
		{key, 1, 4, 4, windowing.OnTime, 0, 15},
	}
	got := briefs(c.got)
	if !slices.Equal(got, want) || c.got[0].Window.End != 13 || c.got[1].Window.End != 13 || c.got[2].Window.End != 16 {
		t.Errorf("results =\n%v\nwant\n%v (ends 13, 13, 16)", c.got, want)
	}
}

func withEarly(s windowing.Spec, every int64, event bool) windowing.Spec {
	s.Early = windowing.EarlySpec{Every: every, Event: event}
	return s
}

// TestEarlySlidingOrder: a sliding tick fires the changed windows by end,
// then key, each once, whichever key changed first; with a window far
// ahead of the others (a record of the far future, the watermark held
// back) too, where the ends are too far apart to be placed by slide.
func TestEarlySlidingOrder(t *testing.T) {
	ka, fa := textKey("a")
	kb, fb := textKey("b")
	type fired struct {
		key   string
		start int64
	}
	const far = 1_000_000_000
	tests := map[string]struct {
		far  bool
		want []fired
	}{
		"ends near": {false, []fired{{ka, 0}, {kb, 0}, {ka, 5}}},
		"one far":   {true, []fired{{ka, 0}, {kb, 0}, {ka, 5}, {kb, far - 5}, {kb, far}}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			e, c := newEngine(t, withEarly(params{"sliding", 10, 5, 0, 0, "on_watermark"}.spec(sumCount...), 5, true))
			e.Advance(0) // where ticks count from
			e.Add(rec(0, 0, kb, fb, 1, 1))
			e.Add(rec(0, 1, ka, fa, 1, 1))
			e.Add(rec(0, 2, ka, fa, 6, 1)) // a second pane of a: [0,10) once
			if tt.far {
				e.Add(rec(0, 3, kb, fb, far+1, 1))
			}
			e.Advance(4) // a tick; [-5,5) is due on time
			var got []fired
			for _, r := range c.got {
				if r.Firing == windowing.Early {
					got = append(got, fired{r.Key, r.Window.Start})
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("early firings %v, want %v", got, tt.want)
			}
		})
	}
}
