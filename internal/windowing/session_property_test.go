package windowing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"aggregator/internal/record"
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
	rng := rand.New(rand.NewPCG(seed, 11))
	ref := newSessionRef(gap, lateness, onClose, aggs)
	ref.early = early
	g := &streamGen{rng: rng, maxTs: rng.Int64N(40) - 30, wm: math.MinInt64, gap: 4, age: 2*gap + lateness + 6}
	s := &stream{name: fmt.Sprintf("seed %d, %d aggregates", seed, len(aggs)), ref: ref, rng: rng, gen: g,
		spec: windowing.Spec{Kind: windowing.KindSession, Gap: gap, Lateness: lateness, OnClose: onClose, Aggregates: aggs, Early: early},
		add:  725, tick: 945, commit: 965, crash: 975,
		record: func() *record.Record {
			rec := g.record()
			if dynamic && rng.IntN(2) == 0 {
				rec.Gap = 1 + rng.Int64N(3*gap)
			}
			return rec
		}}
	tl := s.run(t, steps)
	for _, r := range tl.results {
		switch r.Firing {
		case windowing.Retract:
			retracts++
		case windowing.Early:
			earlies++
		}
	}
	return tl.outcomes, retracts, tl.restored[windowing.SessionEntry], earlies
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
