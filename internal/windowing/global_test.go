package windowing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"aggregator/internal/windowing"
)

// TestGlobalCrashes: a global window engine crashed and restored from its
// changelog at random steps emits what one that never crashed emits: the
// early firings (and the end-of-input one) depend on what changed since
// each key's last firing, which the changelog keeps.
func TestGlobalCrashes(t *testing.T) {
	for _, early := range []windowing.EarlySpec{{Every: 4, Event: true}, {Every: 6}} {
		for seed := range propertySeeds() {
			t.Run(fmt.Sprintf("every %d event %v seed %d", early.Every, early.Event, seed), func(t *testing.T) {
				spec := windowing.Spec{Kind: windowing.KindGlobal, Aggregates: allAggs, Early: early}
				var runs [2]*collector
				for crashes := range 2 {
					rng := rand.New(rand.NewPCG(seed, 5))
					got := &collector{}
					e := newOperator(t, spec, got)
					store := newChangelog()
					g := &streamGen{rng: rng, maxTs: 0, wm: math.MinInt64, gap: 3, age: 10}
					now, restored := int64(math.MinInt64), 0 // the clock, once it starts
					for step := range 400 {
						switch r := rng.IntN(100); {
						case r < 60:
							e.Add(g.record())
						case r < 80:
							g.wm = max(g.wm, g.maxTs-rng.Int64N(8))
							e.Advance(g.wm)
						case r < 90:
							now = max(now, 0) + rng.Int64N(10)
							e.ProcessingTime(now)
						case r < 97:
							if _, err := store.commit(e); err != nil {
								t.Fatalf("step %d: commit: %v", step, err)
							}
						default:
							if crashes == 1 {
								order := rand.New(rand.NewPCG(seed, uint64(step))) // not rng: both runs must see one stream
								e = crashOperator(t, fmt.Sprintf("step %d", step), e, spec, got, store, order)
								if now != math.MinInt64 {
									e.ProcessingTime(now) // the restarted service sees the clock: where ticks count from
								}
								restored += len(store.entries)
							}
						}
					}
					e.Advance(math.MaxInt64)
					if crashes == 1 && restored == 0 {
						t.Fatalf("no entry restored")
					}
					runs[crashes] = got
				}
				early := 0
				for _, r := range runs[0].got {
					if r.Firing != windowing.Early || r.Window != (windowing.Window{Start: math.MinInt64, End: math.MaxInt64}) {
						t.Fatalf("result %+v: want only early firings of the global window", r)
					}
					early++
				}
				if early == 0 || len(runs[0].got) != len(runs[1].got) {
					t.Fatalf("%d early firings; %d results with crashes, %d without", early, len(runs[1].got), len(runs[0].got))
				}
				for i := range runs[0].got {
					if !reflect.DeepEqual(runs[0].got[i], runs[1].got[i]) {
						a, b := runs[1].got[i], runs[0].got[i]
						t.Fatalf("result %d with crashes p%d %s n=%d rev=%d wm=%d, without p%d %s n=%d rev=%d wm=%d", i, a.Partition, a.Key, a.Count, a.Revision, a.Watermark, b.Partition, b.Key, b.Count, b.Revision, b.Watermark)
					}
				}
			})
		}
	}
}
