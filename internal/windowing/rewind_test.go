package windowing_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"aggregator/internal/windowing"
)

// rewindConfigs are the window configs of the rewind tests: tumbling 10
// and sliding 10/5, both emit modes, lateness 0, 5 and 15 (with 15,
// windows that fired at 30 are still open at 25, so an on-time firing
// could repeat them).
func rewindConfigs() map[string]params {
	ps := map[string]params{}
	for _, typ := range []struct {
		name  string
		slide int64
	}{{"tumbling", 0}, {"sliding", 5}} {
		for _, lateness := range []int64{0, 5, 15} {
			for _, emit := range []string{"on_watermark", "on_close"} {
				ps[fmt.Sprintf("%s lateness %d %s", typ.name, lateness, emit)] = params{typ.name, 10, typ.slide, 0, lateness, emit}
			}
		}
	}
	return ps
}

// fate is a result without the watermark it was emitted at: a record of
// a kept partition is judged as at the old watermark, but its late
// firings carry the engine's.
type fate struct {
	Part     int32
	Key      string
	Start    int64
	Count    int64
	Sum      float64
	Firing   windowing.Firing
	Revision int64
}

func fates(rs []windowing.Result, part int32) []fate {
	var out []fate
	for _, r := range rs {
		if r.Partition == part {
			out = append(out, fate{r.Partition, r.Key, r.Window.Start, r.Count, r.Aggregates[0].Num, r.Firing, r.Revision})
		}
	}
	return out
}

// ofPartition keeps part's results, as briefs.
func ofPartition(rs []windowing.Result, part int32) []brief {
	var out []windowing.Result
	for _, r := range rs {
		if r.Partition == part {
			out = append(out, r)
		}
	}
	return briefs(out)
}

// rstep is one step after the rewind: a record of partition part at ts
// (keys: a in partition 0, b in partition 1), or, with part -1, an Advance.
type rstep struct {
	part    int32
	ts      int64
	advance int64
}

// rewindSteps go on after partition 1 joined at 12 while partition 0 was
// at 30.
var rewindSteps = []rstep{
	{0, 15, 0},  // (a) [10,20) fired at 19 (lateness 15: still open) or dropped
	{0, 25, 0},  // [20,30) fired at 29; lateness 0: dropped
	{0, 32, 0},  // [30,40) not fired yet
	{1, 15, 0},  // (b) judged against 12: aggregated, no firing
	{1, 3, 0},   // [0,10) due at 12: a late firing as at 12 (or late)
	{-1, 0, 25}, // (c) partition 1's [10,20) fires; partition 0's does not again
	{0, 27, 0},  // still judged as at 30
	{-1, 0, 35},
	{1, 28, 0},
	{-1, 0, math.MaxInt64},
}

// apply runs s on e, returning the outcome of an Add.
func (s rstep) apply(e *windowing.Engine, seq int64) windowing.AddResult {
	if s.part < 0 {
		e.Advance(s.advance)
		return windowing.AddResult{}
	}
	k, f := textKey([]string{"a", "b"}[s.part])
	return e.Add(rec(s.part, 100+seq, k, f, s.ts, float64(int64(1)<<(seq%40))))
}

func (s rstep) String() string {
	if s.part < 0 {
		return fmt.Sprintf("Advance(%d)", s.advance)
	}
	return fmt.Sprintf("Add(partition %d at %d)", s.part, s.ts)
}

// history0 is partition 0's key a at 5, 15, 25 and 35, the watermark at 30.
func history0(t *testing.T, p params) (*windowing.Engine, *collector) {
	t.Helper()
	e, c := newEngine(t, p.spec(sumCount...))
	a, af := textKey("a")
	for i, ts := range []int64{5, 15, 25, 35} {
		e.Add(rec(0, int64(i), a, af, ts, float64(i+1)))
	}
	e.Advance(30)
	return e, c
}

// owner1 is partition 1's previous owner: key b at 5 and 11, the
// watermark at 12, committed to a changelog.
func owner1(t *testing.T, p params) (*windowing.Engine, *collector, *changelog) {
	t.Helper()
	e, c := newEngine(t, p.spec(sumCount...))
	b, bf := textKey("b")
	e.Add(rec(1, 0, b, bf, 5, 1000))
	e.Add(rec(1, 1, b, bf, 11, 2000))
	e.Advance(12)
	log := newChangelog()
	if _, err := log.commit(e); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return e, c, log
}

// TestRewind: partition 1 (watermark 12) joins an engine at 30 that holds
// partition 0, as Processor.Restore does it: SetFloor(1, 12), Rewind(12,
// [0]), partition 1's state restored. Then partition 0's records keep
// their fates (as in an engine that stayed at 30, o0), partition 1's are
// judged against 12 (as with its previous owner, o1), a window that fired
// does not fire on time again, and the watermark and open windows are
// those of the two.
func TestRewind(t *testing.T) {
	for name, p := range rewindConfigs() {
		t.Run(name, func(t *testing.T) {
			e, c := history0(t, p)
			o0, c0 := history0(t, p)
			o1, c1, log := owner1(t, p)
			moved := len(c1.got) // what the previous owner emitted before the move

			e.SetFloor(1, 12)
			e.Rewind(12, []int32{0})
			if got := e.Watermark(); got != 12 {
				t.Errorf("Watermark() after Rewind(12, [0]) at 30 = %d, want 12", got)
			}
			if got, want := e.Judged(0), int64(30); got != want {
				t.Errorf("Judged(0) after Rewind(12, [0]) at 30 = %d, want %d", got, want)
			}
			if got, want := e.Judged(1), int64(12); got != want {
				t.Errorf("Judged(1) after Rewind(12, [0]) at 30 = %d, want %d", got, want)
			}
			if got, want := e.OpenWindows(), o0.OpenWindows(); got != want {
				t.Errorf("OpenWindows() after Rewind = %d, want %d (as before)", got, want)
			}
			if err := log.restore(e, nil); err != nil {
				t.Fatal(err)
			}
			before := len(c.got)
			e.FinishRestore()
			if got := briefs(c.got[before:]); len(got) != 0 {
				t.Errorf("FinishRestore() at 12 emitted %v, want nothing", got)
			}
			if got, want := e.OpenWindows(), o0.OpenWindows()+o1.OpenWindows(); got != want {
				t.Errorf("OpenWindows() after restoring partition 1 = %d, want %d + %d", got, o0.OpenWindows(), o1.OpenWindows())
			}
			for i, s := range rewindSteps {
				oracle := []*windowing.Engine{o0, o1}[max(s.part, 0)]
				before := len(c.got)
				got := s.apply(e, int64(i))
				want := s.apply(oracle, int64(i))
				s.advanceOther(o0, o1)
				if got != want {
					t.Errorf("step %d: %v = %+v, want %+v", i, s, got, want)
				}
				if got, want := fates(c.got, 0), fates(c0.got, 0); !slices.Equal(got, want) {
					t.Fatalf("step %d: %v: partition 0's results\n%v\nwant (never rewound)\n%v", i, s, got, want)
				}
				if got, want := ofPartition(c.got, 1), ofPartition(c1.got[moved:], 1); !slices.Equal(got, want) {
					t.Fatalf("step %d: %v: partition 1's results\n%v\nwant (previous owner)\n%v", i, s, got, want)
				}
				if got, want := e.OpenWindows(), o0.OpenWindows()+o1.OpenWindows(); got != want {
					t.Errorf("step %d: %v: OpenWindows() = %d, want %d + %d", i, s, got, o0.OpenWindows(), o1.OpenWindows())
				}
				if got := ofPartition(c.got[before:], 0); s.advance == 25 && len(got) != 0 {
					t.Errorf("step %d: %v fired partition 0's %v, which fired at 30 or are not due", i, s, got)
				}
			}
			if dup := twiceOnTime(c.got); dup != "" {
				t.Errorf("fired on time twice: %s", dup)
			}
		})
	}
}

// advanceOther gives an Advance step to both oracles (the one apply ran
// on ignores it the second time).
func (s rstep) advanceOther(o0, o1 *windowing.Engine) {
	if s.part < 0 {
		o0.Advance(s.advance)
		o1.Advance(s.advance)
	}
}

// twiceOnTime names a (partition, key, window) with two on-time or final
// firings, or returns "".
func twiceOnTime(rs []windowing.Result) string {
	type id struct {
		part  int32
		key   string
		start int64
	}
	seen := map[id]bool{}
	for _, r := range rs {
		if r.Firing == windowing.Late {
			continue
		}
		k := id{r.Partition, r.Key, r.Window.Start}
		if seen[k] {
			return fmt.Sprintf("partition %d %s [%d,%d) (%v rev %d at %d)", r.Partition, r.Key, r.Window.Start, r.Window.End, r.Firing, r.Revision, r.Watermark)
		}
		seen[k] = true
	}
	return ""
}

// TestRewindHitsFiredWindows pins the interesting fates of TestRewind in
// one config (tumbling 10, lateness 15, on_watermark): after Rewind(12,
// [0]) at 30, a record of partition 0 for [10,20), which fired at 19,
// fires it late at once (revision 1), and Advance(25) leaves it alone
// while it fires partition 1's [10,20) on time.
func TestRewindHitsFiredWindows(t *testing.T) {
	a, af := textKey("a")
	b, bf := textKey("b")
	e, c := history0(t, params{"tumbling", 10, 0, 0, 15, "on_watermark"})
	e.Rewind(12, []int32{0})
	before := len(c.got)
	if got := e.Add(rec(0, 10, a, af, 15, 8)); got.Kind != windowing.Aggregated {
		t.Errorf("Add(partition 0 at 15) after Rewind = %+v, want aggregated", got)
	}
	if got, want := briefs(c.got[before:]), []brief{{a, 10, 2, 10, windowing.Late, 1, 12}}; !slices.Equal(got, want) {
		t.Errorf("Add(partition 0 at 15) after Rewind emitted %v, want %v", got, want)
	}
	before = len(c.got)
	if got := e.Add(rec(1, 0, b, bf, 15, 100)); got.Kind != windowing.Aggregated {
		t.Errorf("Add(partition 1 at 15) after Rewind = %+v, want aggregated", got)
	}
	e.Advance(25)
	if got, want := briefs(c.got[before:]), []brief{{b, 10, 1, 100, windowing.OnTime, 0, 25}}; !slices.Equal(got, want) {
		t.Errorf("Add(partition 1 at 15), Advance(25) emitted %v, want %v", got, want)
	}
}

// TestRewindNoOp: Rewind to a watermark at or above the current one
// changes nothing.
func TestRewindNoOp(t *testing.T) {
	for _, wm := range []int64{30, 31} {
		e, _ := history0(t, params{"tumbling", 10, 0, 0, 5, "on_watermark"})
		e.Rewind(wm, []int32{0})
		if got := e.Watermark(); got != 30 {
			t.Errorf("Rewind(%d, [0]) at 30: Watermark() = %d, want 30", wm, got)
		}
		if got := e.Judged(0); got != 30 {
			t.Errorf("Rewind(%d, [0]) at 30: Judged(0) = %d, want 30", wm, got)
		}
	}
}

// TestRewindRemovePartitionResetsFloor (e): a partition removed after a
// Rewind, assigned again, has its records judged against the current
// watermark, as in an engine that is at 12 and never saw it.
func TestRewindRemovePartitionResetsFloor(t *testing.T) {
	for name, p := range rewindConfigs() {
		t.Run(name, func(t *testing.T) {
			e, c := history0(t, p)
			e.Rewind(12, []int32{0})
			e.RemovePartition(0)
			if got := e.Judged(0); got != 12 {
				t.Errorf("Judged(0) after RemovePartition(0) = %d, want 12", got)
			}
			if got := e.OpenWindows(); got != 0 {
				t.Errorf("OpenWindows() after RemovePartition(0) = %d, want 0", got)
			}
			fresh, fc := newEngine(t, p.spec(sumCount...))
			fresh.Advance(12)
			before := len(c.got)
			for i, s := range []rstep{{0, 15, 0}, {0, 5, 0}, {-1, 0, 25}, {0, 16, 0}, {-1, 0, math.MaxInt64}} {
				got := s.apply(e, int64(i))
				want := s.apply(fresh, int64(i))
				if got != want {
					t.Errorf("step %d: %v = %+v, want %+v", i, s, got, want)
				}
			}
			if got, want := briefs(c.got[before:]), briefs(fc.got); !slices.Equal(got, want) {
				t.Errorf("results after RemovePartition(0)\n%v\nwant (fresh engine at 12)\n%v", got, want)
			}
		})
	}
}

// TestRewindSetFloor (f): SetFloor alone. A partition's records are
// judged against its floor when it is above the watermark (as in an engine
// at 30, o30), the other partition's against the watermark (as in an
// engine at 12, o12). A floor is never lowered, and one below the
// watermark changes nothing.
func TestRewindSetFloor(t *testing.T) {
	for name, p := range rewindConfigs() {
		t.Run(name, func(t *testing.T) {
			e, c := newEngine(t, p.spec(sumCount...))
			o12, c12 := newEngine(t, p.spec(sumCount...))
			o30, c30 := newEngine(t, p.spec(sumCount...))
			e.Advance(12)
			o12.Advance(12)
			o30.Advance(30)
			e.SetFloor(0, 5)
			e.SetFloor(1, 30)
			e.SetFloor(1, 20)
			if got := e.Judged(0); got != 12 {
				t.Errorf("Judged(0) after SetFloor(0, 5) at 12 = %d, want 12", got)
			}
			if got := e.Judged(1); got != 30 {
				t.Errorf("Judged(1) after SetFloor(1, 30), SetFloor(1, 20) at 12 = %d, want 30", got)
			}
			if got := e.Judged(7); got != 12 {
				t.Errorf("Judged(7) (no floor) at 12 = %d, want 12", got)
			}
			steps := []rstep{{1, 15, 0}, {1, 25, 0}, {0, 15, 0}, {1, 5, 0}, {1, 35, 0}, {0, 25, 0},
				{-1, 0, 25}, {1, 27, 0}, {-1, 0, 35}, {1, 38, 0}, {-1, 0, math.MaxInt64}}
			for i, s := range steps {
				got := s.apply(e, int64(i))
				want := s.apply([]*windowing.Engine{o12, o30}[max(s.part, 0)], int64(i))
				s.advanceOther(o12, o30)
				if got != want {
					t.Errorf("step %d: %v = %+v, want %+v", i, s, got, want)
				}
			}
			if got, want := fates(c.got, 1), fates(c30.got, 1); !slices.Equal(got, want) {
				t.Errorf("partition 1's results (floor 30)\n%v\nwant (engine at 30)\n%v", got, want)
			}
			if got, want := ofPartition(c.got, 0), ofPartition(c12.got, 0); !slices.Equal(got, want) {
				t.Errorf("partition 0's results\n%v\nwant (engine at 12)\n%v", got, want)
			}
			if dup := twiceOnTime(c.got); dup != "" {
				t.Errorf("fired on time twice: %s", dup)
			}
		})
	}
}
