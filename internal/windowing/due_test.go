package windowing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"aggregator/internal/windowing"
)

// TestDueSkipsNothing: an operator given a watermark by StartAt while it
// is below its Due, and by Advance from Due on, emits what one given
// every watermark by Advance emits, in every window kind, with
// event-time early firings and count timeouts; records arrive between
// the steps, some late. (A holder of many operators that follow one
// watermark hands each only the rises that make it due: pipeline's
// mergedWatermark lists.)
func TestDueSkipsNothing(t *testing.T) {
	early := windowing.EarlySpec{Every: 700, Event: true}
	specs := map[string]windowing.Spec{
		"tumbling":       {Kind: windowing.KindTumbling, Size: 1000, Lateness: 500},
		"sliding":        {Kind: windowing.KindSliding, Size: 3000, Slide: 1000, Lateness: 500},
		"on_close":       {Kind: windowing.KindTumbling, Size: 1000, Lateness: 800, OnClose: true},
		"early tumbling": {Kind: windowing.KindTumbling, Size: 2000, Lateness: 500, Early: early},
		"early sliding":  {Kind: windowing.KindSliding, Size: 3000, Slide: 1000, Early: early},
		"session":        {Kind: windowing.KindSession, Gap: 400, Lateness: 300},
		"early session":  {Kind: windowing.KindSession, Gap: 400, Early: early},
		"global":         {Kind: windowing.KindGlobal, Early: early},
		"count timeout":  {Kind: windowing.KindCount, Size: 3, Timeout: 900},
	}
	for name, spec := range specs {
		spec.Aggregates = sumCount
		for seed := range uint64(5) {
			t.Run(fmt.Sprintf("%s/%d", name, seed), func(t *testing.T) {
				every, lazy := &collector{}, &collector{}
				a, err := windowing.New(spec, every)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := windowing.New(spec, lazy)
				rng := rand.New(rand.NewPCG(seed, 7))
				wm, skipped := int64(math.MinInt64), 0
				for i := range 2000 {
					if rng.IntN(3) == 0 {
						if wm == math.MinInt64 {
							wm = 0
						}
						wm += int64(rng.IntN(250))
						a.Advance(wm)
						if wm >= b.Due() {
							b.Advance(wm)
						} else {
							b.StartAt(wm)
							skipped++
						}
						continue
					}
					key, fields := textKey(fmt.Sprint("k", rng.IntN(6)))
					ts := max(wm, 0) + int64(rng.IntN(2000)) - 600
					r := rec(0, int64(i), key, fields, ts, 1)
					if got, want := b.Add(r), a.Add(r); got.Kind != want.Kind {
						t.Fatalf("record %d at %d: %v, want %v", i, ts, got.Kind, want.Kind)
					}
				}
				a.Advance(math.MaxInt64)
				b.Advance(math.MaxInt64)
				if !reflect.DeepEqual(lazy.got, every.got) {
					t.Fatalf("results differ:\n%v\nwant\n%v", briefs(lazy.got), briefs(every.got))
				}
				if skipped == 0 || len(every.got) == 0 {
					t.Fatalf("%d steps skipped, %d results: the case tests nothing", skipped, len(every.got))
				}
			})
		}
	}
}
