package windowing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"aggregator/internal/windowing"
)

var sessionCombos = map[string]struct {
	gap, lateness int64
	onClose       bool
	dynamic       bool
}{
	"no lateness":           {5, 0, false, false},
	"lateness":              {5, 7, false, false},
	"lateness, short gap":   {2, 4, false, false},
	"on_close":              {5, 6, true, false},
	"dynamic gaps":          {4, 5, false, true},
	"dynamic gaps on_close": {4, 3, true, true},
	"dynamic, no lateness":  {6, 0, false, true},
}

// TestSessionsMatchReference drives Sessions and the naive sessionRef with
// the same random streams (disorder, late records, ties at session edges,
// records that bridge sessions, dynamic gaps, watermark advances, removed
// partitions, commits and crashes with a restore from the changelog) and
// requires the same outcomes, the same results and retractions in the same
// order, and the same open sessions.
func TestSessionsMatchReference(t *testing.T) {
	for name, c := range sessionCombos {
		t.Run(name, func(t *testing.T) {
			var kinds [3]int
			retracts, restored := 0, 0
			seeds := uint64(60)
			if raceEnabled {
				seeds = 20
			}
			for seed := range seeds {
				for _, aggs := range [][]windowing.Aggregate{allAggs, fifoAggs} {
					k, r, n, _ := compareSessions(t, c.gap, c.lateness, c.onClose, c.dynamic, windowing.EarlySpec{}, aggs, seed, 400)
					for i := range kinds {
						kinds[i] += k[i]
					}
					retracts += r
					restored += n
				}
			}
			// With no lateness a session is dropped when it fires: nothing can merge into it after.
			if kinds[windowing.LateEvent] == 0 || !c.onClose && c.lateness > 0 && retracts == 0 || restored == 0 {
				t.Errorf("outcomes %v, %d retractions, %d sessions restored: the streams miss late records, merges after firing, or restores", kinds, retracts, restored)
			}
		})
	}
}

func compareSessions(t *testing.T, gap, lateness int64, onClose, dynamic bool, early windowing.EarlySpec, aggs []windowing.Aggregate, seed uint64, steps int) (kinds [3]int, retracts, restored, earlies int) {
	t.Helper()
	run := fmt.Sprintf("seed %d, %d aggregates", seed, len(aggs))
	rng := rand.New(rand.NewPCG(seed, 11))
	spec := windowing.Spec{Kind: windowing.KindSession, Gap: gap, Lateness: lateness, OnClose: onClose, Aggregates: aggs, Early: early}
	got := &collector{}
	e := newSessions(t, spec, got)
	ref := newSessionRef(gap, lateness, onClose, aggs)
	ref.early = early
	now := int64(math.MinInt64)
	store := newChangelog()
	g := &streamGen{rng: rng, maxTs: rng.Int64N(40) - 30, wm: math.MinInt64, gap: 4, age: 2*gap + lateness + 6}
	for step := range steps {
		what := ""
		switch r := rng.IntN(1000); {
		case r < 725:
			rec := g.record()
			if dynamic && rng.IntN(2) == 0 {
				rec.Gap = 1 + rng.Int64N(3*gap)
			}
			what = fmt.Sprintf("Add(p%d %s t=%d gap=%d)", rec.Partition, rec.Key, rec.Time, rec.Gap)
			o, want := e.Add(rec), ref.Add(rec)
			if o != want {
				t.Fatalf("%s: step %d: %s = %+v, want %+v", run, step, what, o, want)
			}
			kinds[want.Kind]++
		case r < 945 && early.Every > 0 && !early.Event && rng.IntN(2) == 0:
			now = max(now, -50) + rng.Int64N(2*early.Every)
			what = fmt.Sprintf("ProcessingTime(%d)", now)
			e.ProcessingTime(now)
			ref.ProcessingTime(now)
		case r < 945:
			g.wm = max(g.wm, g.maxTs-rng.Int64N(8))
			what = fmt.Sprintf("Advance(%d)", g.wm)
			e.Advance(g.wm)
			ref.Advance(g.wm)
		case r < 965:
			n, err := store.commit(e)
			if err != nil {
				t.Fatalf("%s: step %d: commit: %v", run, step, err)
			}
			what = fmt.Sprintf("commit (%d entries)", n)
		case r < 975:
			e = crashSessions(t, fmt.Sprintf("%s: step %d", run, step), e, spec, got, store, rng)
			restored += len(store.entries)
			if now != math.MinInt64 {
				e.ProcessingTime(now)
			}
			what = fmt.Sprintf("crash at W=%d (%d entries restored)", e.Watermark(), len(store.entries))
		default:
			part := rng.Int32N(3)
			what = fmt.Sprintf("RemovePartition(%d)", part)
			e.RemovePartition(part)
			ref.RemovePartition(part)
			store.dropPartition(part)
		}
		checkSessions(t, fmt.Sprintf("%s: step %d %s", run, step, what), e, ref, got.got)
	}
	e.Advance(math.MaxInt64)
	ref.Advance(math.MaxInt64)
	checkSessions(t, run+": flush", e, ref, got.got)
	for _, r := range got.got {
		switch r.Firing {
		case windowing.Retract:
			retracts++
		case windowing.Early:
			earlies++
		}
	}
	return kinds, retracts, restored, earlies
}

// TestSessionsEarlyMatchesReference is TestSessionsMatchReference with
// early firings, in event time (every 3 and 7) and processing time (5).
func TestSessionsEarlyMatchesReference(t *testing.T) {
	for name, c := range sessionCombos {
		for _, early := range []windowing.EarlySpec{{Every: 3, Event: true}, {Every: 7, Event: true}, {Every: 5}} {
			t.Run(fmt.Sprintf("%s/every %d event %v", name, early.Every, early.Event), func(t *testing.T) {
				t.Parallel()
				earlies, restored := 0, 0
				for seed := range extraSeeds() {
					_, _, n, e := compareSessions(t, c.gap, c.lateness, c.onClose, c.dynamic, early, allAggs, seed, 400)
					earlies, restored = earlies+e, restored+n
				}
				if earlies == 0 || restored == 0 {
					t.Errorf("%d early firings, %d sessions restored: the streams miss early firings or restores", earlies, restored)
				}
			})
		}
	}
}

func newSessions(t testing.TB, spec windowing.Spec, sink windowing.Sink) *windowing.Sessions {
	t.Helper()
	e, err := windowing.NewSessions(spec, sink)
	if err != nil {
		t.Fatalf("NewSessions(%+v) = %v", spec, err)
	}
	e.TrackChanges()
	return e
}

// crashSessions is crash for Sessions: commit, then a fresh engine at the
// same watermark restored from the changelog, which must hand out no
// changes.
func crashSessions(t *testing.T, at string, e *windowing.Sessions, spec windowing.Spec, sink windowing.Sink, store *changelog, rng *rand.Rand) *windowing.Sessions {
	t.Helper()
	if _, err := store.commit(e); err != nil {
		t.Fatalf("%s: crash: commit: %v", at, err)
	}
	r := newSessions(t, spec, sink)
	r.Advance(e.Watermark())
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

func checkSessions(t *testing.T, at string, e *windowing.Sessions, ref *sessionRef, got []windowing.Result) {
	t.Helper()
	if len(got) != len(ref.out) {
		t.Fatalf("%s: %d results, want %d\ngot  %v\nwant %v", at, len(got), len(ref.out), got, ref.out)
	}
	for i := len(got) - ref.checked; i < len(got); i++ {
		if err := sameResult(got[i], ref.out[i], ref.aggs); err != nil {
			t.Fatalf("%s: result %d: %v\ngot  %+v\nwant %+v", at, i, err, got[i], ref.out[i])
		}
	}
	ref.checked = 0
	if n, want := e.OpenWindows(), ref.open(); n != want {
		t.Fatalf("%s: OpenWindows() = %d, want %d", at, n, want)
	}
}
