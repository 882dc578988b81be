package windowing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// TestQuantileExactUpTo256 feeds 1, 2, 256 and 257 distinct values of one
// key into one window of every kind, whole or restored from the changelog
// halfway: up to 256 values each quantile is the value at nearest rank
// itself (docs/semantics.md#aggregates), at 257 within 1%. The tumbling window holds them in
// one pane, the sliding one merges 10 panes, the session merges a session
// per pair of records, and the count window is exactly n records.
func TestQuantileExactUpTo256(t *testing.T) {
	qs := []float64{0.01, 0.25, 0.5, 0.99, 1}
	var aggs []windowing.Aggregate
	for _, q := range qs {
		aggs = append(aggs, windowing.Aggregate{Fn: windowing.FnQuantile, Q: q})
	}
	aggs = append(aggs, windowing.Aggregate{Fn: windowing.FnCountField})
	for _, n := range []int{1, 2, 256, 257} {
		specs := map[string]windowing.Spec{
			"tumbling": {Kind: windowing.KindTumbling, Size: 10_000, Aggregates: aggs},
			"sliding":  {Kind: windowing.KindSliding, Size: 10_000, Slide: 1000, Aggregates: aggs},
			"session":  {Kind: windowing.KindSession, Gap: 10, Aggregates: aggs},
			"count":    {Kind: windowing.KindCount, Size: int64(n), Aggregates: aggs},
		}
		for kind, spec := range specs {
			for _, restore := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%d values/restore %v", kind, n, restore), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(n), 3))
					vals := make([]float64, n)
					for i := range vals {
						vals[i] = float64(i*37%1009) - 500.25 // distinct
					}
					rng.Shuffle(n, func(i, j int) { vals[i], vals[j] = vals[j], vals[i] })
					res := quantileRun(t, spec, vals, restore)
					if res.Count != int64(n) || res.Aggregates[len(qs)].Num != float64(n) {
						t.Fatalf("%d values: result %+v, want one window of all of them", n, res)
					}
					for i, q := range qs {
						got, want := res.Aggregates[i], exactNearestRank(q, vals)
						if n <= 256 && (got.Num != want || got.Null) {
							t.Errorf("%d values: quantile %v = %+v, want %v exactly", n, q, got, want)
						}
						if n > 256 && math.Abs(got.Num-want) > sketchBound*math.Abs(want) {
							t.Errorf("%d values: quantile %v = %v, want %v within 1%%", n, q, got.Num, want)
						}
					}
				})
			}
		}
	}
}

// quantileRun adds vals as records of one key (times per the kind: see
// TestQuantileExactUpTo256), optionally restoring the operator from its
// changelog after half of them, flushes, and returns the one result.
func quantileRun(t *testing.T, spec windowing.Spec, vals []float64, restore bool) windowing.Result {
	t.Helper()
	got := &collector{}
	op := newOperator(t, spec, got)
	k, kf := textKey("k")
	times := make([]int64, len(vals))
	for i := range times {
		switch spec.Kind {
		case windowing.KindSession: // every even record its own session, then the odd ones bridge them
			times[i] = 5 * int64(i)
		default:
			times[i] = int64(i * 10_000 / len(vals))
		}
	}
	order := make([]int, 0, len(vals))
	for i := range vals {
		if spec.Kind != windowing.KindSession || i%2 == 0 {
			order = append(order, i)
		}
	}
	for i := 1; spec.Kind == windowing.KindSession && i < len(vals); i += 2 {
		order = append(order, i)
	}
	store := newChangelog()
	for j, i := range order {
		if restore && j == len(order)/2 {
			if _, err := store.commit(op); err != nil {
				t.Fatal(err)
			}
			op = newOperator(t, spec, got)
			if err := store.restore(op, nil); err != nil {
				t.Fatal(err)
			}
			op.FinishRestore()
		}
		op.Add(&record.Record{Offset: int64(j), Time: times[i], Key: k, KeyFields: kf, Values: repeat(record.Number(vals[i]), len(spec.Aggregates))})
	}
	op.Advance(math.MaxInt64)
	var out []windowing.Result
	for _, r := range got.got {
		if r.Firing != windowing.Retract && (spec.Kind != windowing.KindSliding || r.Window == windowing.Window{Start: 0, End: 10_000}) {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no result: %v", briefs(got.got))
	}
	return out[len(out)-1]
}

func newOperator(t *testing.T, spec windowing.Spec, sink windowing.Sink) windowing.Operator {
	t.Helper()
	op, err := windowing.New(spec, sink)
	if err != nil {
		t.Fatalf("New(%+v) = %v", spec, err)
	}
	op.TrackChanges()
	return op
}

func repeat(v record.Value, n int) []record.Value {
	vs := make([]record.Value, n)
	for i := range vs {
		vs[i] = v
	}
	return vs
}
