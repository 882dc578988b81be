package windowing_test

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"aggregator/internal/windowing"
)

// builtCombos are the window configurations TestBuildMatchesRestore runs,
// with the early firings of some.
var builtCombos = []struct {
	name  string
	early windowing.EarlySpec
}{
	{"tumbling", windowing.EarlySpec{}},
	{"tumbling lateness offset", windowing.EarlySpec{}},
	{"tumbling on_close", windowing.EarlySpec{}},
	{"tumbling lateness offset", windowing.EarlySpec{Every: 3, Event: true}},
	{"sliding multiple lateness", windowing.EarlySpec{}},
	{"sliding not multiple offset", windowing.EarlySpec{}},
	{"sliding not multiple on_close", windowing.EarlySpec{}},
	{"sliding many windows on_watermark", windowing.EarlySpec{}},
	{"sliding 10 panes offset lateness", windowing.EarlySpec{}},
	{"sliding 12 panes on_close", windowing.EarlySpec{}},
	{"sliding multiple lateness", windowing.EarlySpec{Every: 5}},
	{"session lateness", windowing.EarlySpec{}},
	{"session on_close", windowing.EarlySpec{}},
	{"session lateness", windowing.EarlySpec{Every: 4, Event: true}},
	{"count 4 timeout 6", windowing.EarlySpec{}},
	{"count 6 every 2", windowing.EarlySpec{}},
}

// builtCounts are builtCombos' count windows.
var builtCounts = map[string]windowing.Spec{
	"count 4 timeout 6": {Kind: windowing.KindCount, Size: 4, Timeout: 6},
	"count 6 every 2":   {Kind: windowing.KindCount, Size: 6, Slide: 2},
}

// builtSessions are builtCombos' session windows (gap = size).
var builtSessions = map[string]params{
	"session lateness": {"session", 5, 0, 0, 4, "on_watermark"},
	"session on_close": {"session", 4, 0, 0, 2, "on_close"},
}

// commitLog is an owner's changelog as a built copy tails it: every
// commit's changes, in order, and the compacted state and watermark a
// restore reads.
type commitLog struct {
	commits [][]windowing.Entry
	store   *changelog
}

// commit takes e's changes as a commit.
func (l *commitLog) commit(t *testing.T, e windowing.Operator) {
	var c []windowing.Entry
	e.Changes(func(en *windowing.Entry) { c = append(c, copyEntry(en)) })
	for i := range c {
		if c[i].Deleted {
			delete(l.store.entries, idOf(&c[i]))
		} else {
			l.store.entries[idOf(&c[i])] = copyEntry(&c[i])
		}
	}
	l.store.watermark = e.Watermark()
	l.commits = append(l.commits, c)
}

// build returns an engine of spec built from l's commits by Update, the
// commits drained in random groups (a drain hands each identity's latest
// change, slices in any order, then windows), pruned at dropped and done
// restoring.
func (l *commitLog) build(t *testing.T, spec windowing.Spec, rng *rand.Rand, dropped int64) (windowing.Builder, *collector) {
	t.Helper()
	got := &collector{}
	b := newOperator(t, spec, got).(windowing.Builder)
	if e, ok := b.(*windowing.Engine); ok {
		windowing.SweepEvery(e, rng.IntN(3))
	}
	for lo := 0; lo < len(l.commits); {
		hi := min(len(l.commits), lo+1+rng.IntN(4))
		latest := map[entryID]windowing.Entry{}
		for _, c := range l.commits[lo:hi] {
			for _, en := range c {
				latest[idOf(&en)] = en
			}
		}
		lo = hi
		ids := slices.Collect(maps.Keys(latest))
		rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		slices.SortStableFunc(ids, func(a, b entryID) int { return cmp.Compare(a.kind, b.kind) })
		for _, id := range ids {
			en := latest[id]
			if err := b.Update(&en); err != nil {
				t.Fatalf("Update(%v) = %v", id, err)
			}
		}
	}
	b.Prune(dropped)
	b.FinishRestore()
	return b, got
}

// TestBuildMatchesRestore: an engine built from an owner's commits by
// Update (drained at random points), then pruned, holds what a restore of
// the compacted changelog holds (every pane, window, revision, flag and
// timer), and fires the same from then on, under the owner's watermark
// and under a higher one (a lower allowed_lateness since, or an owner
// further ahead than its last commit). Random streams of records,
// watermark advances and commits, over tumbling and sliding windows,
// emit modes, lateness, early firings.
func TestBuildMatchesRestore(t *testing.T) {
	for _, c := range builtCombos {
		p, ok := propertyCombos[c.name]
		if !ok {
			p, ok = builtSessions[c.name]
		}
		if !ok { // count windows: the stream's times and lateness only
			p = params{"count", 5, 0, 0, 0, "on_watermark"}
		}
		t.Run(fmt.Sprintf("%s/early %d", c.name, c.early.Every), func(t *testing.T) {
			t.Parallel()
			checks, pruned := 0, 0
			for seed := range propertySeeds() {
				rng := rand.New(rand.NewPCG(seed, 39))
				aggs := allAggs
				if seed%2 == 1 {
					aggs = fifoAggs
				}
				var spec windowing.Spec
				if cs, ok := builtCounts[c.name]; ok {
					spec = cs
					spec.Aggregates = aggs
				} else {
					spec = p.spec(aggs...)
				}
				spec.Early = c.early
				owner := newOperator(t, spec, &collector{})
				gen := &streamGen{rng: rng, maxTs: rng.Int64N(40) - 30, wm: math.MinInt64, gap: 3, age: max(13, p.size+p.lateness+4)}
				l := &commitLog{store: newChangelog()}
				for step := range 300 {
					switch r := rng.IntN(1000); {
					case r < 700:
						owner.Add(gen.record())
					case r < 900:
						gen.wm = max(gen.wm, gen.maxTs-rng.Int64N(8))
						owner.Advance(gen.wm)
					case r < 970:
						l.commit(t, owner)
					default:
						dropped := l.store.watermark
						if rng.IntN(2) == 0 && dropped > math.MinInt64 {
							dropped += rng.Int64N(p.size + p.lateness + 1)
						}
						n := compareBuilt(t, fmt.Sprintf("seed %d step %d dropped %d", seed, step, dropped), spec, l, rng, dropped)
						checks++
						pruned += n
					}
				}
			}
			if _, counts := builtCounts[c.name]; checks == 0 || pruned == 0 && !counts {
				t.Errorf("%d checks, %d entries past lateness: the streams miss the cases", checks, pruned)
			}
		})
	}
}

// compareBuilt builds an engine from l and restores another from its
// store at dropped, and requires the same state, tombstones, and firings
// over the same records and watermarks after. It returns how many
// entries the restore left out as past lateness.
func compareBuilt(t *testing.T, at string, spec windowing.Spec, l *commitLog, rng *rand.Rand, dropped int64) int {
	t.Helper()
	wantGot := &collector{}
	want := newOperator(t, spec, wantGot).(windowing.Builder)
	store := *l.store
	store.watermark = dropped
	if err := store.restore(want, rng); err != nil {
		t.Fatalf("%s: restore: %v", at, err)
	}
	want.FinishRestore()
	got, gotGot := l.build(t, spec, rng, dropped)
	windowing.CheckInvariants(got)
	if ge, ok := got.(*windowing.Engine); ok {
		if g, w := windowing.EngineState(ge), windowing.EngineState(want.(*windowing.Engine)); !slices.Equal(g, w) {
			t.Fatalf("%s: built\n%q\nrestored\n%q", at, g, w)
		}
	}
	if g, w := got.OpenWindows(), want.OpenWindows(); g != w {
		t.Fatalf("%s: built, %d open windows; restored %d", at, g, w)
	}
	gone := func(e windowing.Operator) []string {
		var out []string
		e.Changes(func(en *windowing.Entry) { out = append(out, fmt.Sprintf("%v deleted %v", idOf(en), en.Deleted)) })
		slices.Sort(out)
		return out
	}
	wantGone := gone(want)
	if g := gone(got); !slices.Equal(g, wantGone) {
		t.Fatalf("%s: built, Changes hands out\n%q\nrestored\n%q", at, g, wantGone)
	}
	// The same records and watermarks after: the same firings.
	wm := max(dropped, l.store.watermark)
	gen := &streamGen{rng: rng, maxTs: max(wm, -30), wm: wm, gap: 3, age: 20}
	for range 40 {
		if rng.IntN(3) == 0 {
			gen.wm = max(gen.wm, gen.maxTs-rng.Int64N(8))
			got.Advance(gen.wm)
			want.Advance(gen.wm)
			continue
		}
		r := gen.record()
		if g, w := got.Add(r), want.Add(r); g != w {
			t.Fatalf("%s: built Add(%+v) = %+v, restored %+v", at, r, g, w)
		}
	}
	got.Advance(math.MaxInt64)
	want.Advance(math.MaxInt64)
	if g, w := briefs(gotGot.got), briefs(wantGot.got); !slices.Equal(g, w) {
		t.Fatalf("%s: built fires\n%v\nrestored\n%v", at, g, w)
	}
	for i := range gotGot.got {
		if err := sameResult(gotGot.got[i], wantGot.got[i], spec.Aggregates); err != nil {
			t.Fatalf("%s: result %d: %v", at, i, err)
		}
	}
	return len(wantGone)
}

// TestUpdateReplacesAndDeletes: Update puts an entry in place of the one
// held, and a deletion takes a slice away with the windows no other
// slice of its key is in.
func TestUpdateReplacesAndDeletes(t *testing.T) {
	k, _ := textKey("k")
	sliding := params{"sliding", 10, 5, 0, 0, "on_watermark"}.spec(sumCount...)
	e, got := newEngine(t, sliding)
	slice := func(start, n int64, deleted bool) *windowing.Entry {
		return &windowing.Entry{Kind: windowing.SliceEntry, ID: k, Start: start, Count: n, Nums: []float64{float64(n), float64(n)}, Deleted: deleted}
	}
	for _, en := range []*windowing.Entry{slice(0, 1, false), slice(5, 2, false), slice(0, 3, false), slice(10, 4, false), slice(5, 0, true)} {
		if err := e.Update(en); err != nil {
			t.Fatalf("Update(%+v) = %v", en, err)
		}
	}
	e.Prune(math.MinInt64)
	e.FinishRestore()
	if n := e.OpenWindows(); n != 4 { // [-5,5) [0,10) of slice 0; [5,15) [10,20) of slice 10
		t.Errorf("OpenWindows() = %d, want 4", n)
	}
	e.Advance(math.MaxInt64)
	want := []brief{{k, -5, 3, 3, windowing.OnTime, 0, math.MaxInt64}, {k, 0, 3, 3, windowing.OnTime, 0, math.MaxInt64},
		{k, 5, 4, 4, windowing.OnTime, 0, math.MaxInt64}, {k, 10, 4, 4, windowing.OnTime, 0, math.MaxInt64}}
	if g := briefs(got.got); !slices.Equal(g, want) {
		t.Errorf("fired %v, want %v", g, want)
	}
}

// TestBuildKeepsFewEarlyNotes: a copy with early firings, whose owner's
// ticks clear a slice's Changed flag and its records set it again,
// update after update, keeps a few early-firing notes, not one an update.
func TestBuildKeepsFewEarlyNotes(t *testing.T) {
	k, _ := textKey("k")
	for _, p := range []params{{"tumbling", 10, 0, 0, 0, "on_watermark"}, {"session", 10, 0, 0, 0, "on_watermark"}} {
		spec := p.spec(sumCount...)
		spec.Early = windowing.EarlySpec{Every: 3, Event: true}
		op := newOperator(t, spec, &collector{}).(windowing.Builder)
		kind := map[string]windowing.EntryKind{"tumbling": windowing.SliceEntry, "session": windowing.SessionEntry}[p.typ]
		for i := range 100_000 {
			en := &windowing.Entry{Kind: kind, ID: k, Start: int64(i % 50 * 100), End: int64(i%50*100 + 10), Count: 1, Nums: []float64{1, 1}, Changed: i%3 != 0}
			if err := op.Update(en); err != nil {
				t.Fatalf("%s: Update(%+v) = %v", p.typ, en, err)
			}
		}
		if n := windowing.EarlyNotes(op); n > 2*op.OpenWindows()+1024 {
			t.Errorf("%s: 100,000 updates of 50 entries keep %d early-firing notes", p.typ, n)
		}
	}
}

// TestBuildKeepsFewTimers: a copy's timers never come due, so an update
// must not leave them behind for ever: sessions of keys that come and go
// (each put, then deleted), and count windows of keys whose window moves
// on (each a new timeout), keep timers about as many as their windows.
func TestBuildKeepsFewTimers(t *testing.T) {
	session := params{"session", 10, 0, 0, 0, "on_watermark"}.spec(sumCount...)
	count := windowing.Spec{Kind: windowing.KindCount, Size: 4, Timeout: 5, Aggregates: sumCount}
	for name, spec := range map[string]windowing.Spec{"session": session, "count": count} {
		op := newOperator(t, spec, &collector{}).(windowing.Builder)
		for i := range 50_000 {
			var en *windowing.Entry
			if name == "session" { // a new key each time, whose session goes
				k, _ := textKey(fmt.Sprint("k", i))
				en = &windowing.Entry{Kind: windowing.SessionEntry, ID: k, Start: int64(i * 100), End: int64(i*100 + 10), Count: 1, Nums: []float64{1, 1}}
			} else { // 500 keys, each update a window later
				k, _ := textKey(fmt.Sprint("k", i%500))
				en = &windowing.Entry{Kind: windowing.CountEntry, ID: k, Count: 1, Revision: int64(i), Nums: []float64{1, 1}, Lo: int64(i), Hi: int64(i), First: int64(i)}
			}
			if err := op.Update(en); err != nil {
				t.Fatalf("%s: Update(%+v) = %v", name, en, err)
			}
			if name == "session" && i%10 != 0 {
				en.Deleted = true
				if err := op.Update(en); err != nil {
					t.Fatal(err)
				}
			}
		}
		if n, open := windowing.Timers(op), op.OpenWindows(); n > 4*open+4096 {
			t.Errorf("%s: 50,000 updates keep %d timers for %d open windows", name, n, open)
		}
	}
}
