package windowing_test

import (
	"math"
	"slices"
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// TestLatenessEdges: window [0,5000) has maxTimestamp 4999 and, with 2s
// lateness, cleanupTime 6999. A record for it arrives at watermark wm after
// an earlier record of the same key; on_watermark fires on time at 4999.
func TestLatenessEdges(t *testing.T) {
	key, fields := textKey("k")
	tests := map[string]struct {
		emit     string
		wm       int64
		kind     windowing.Outcome
		fromAdd  []brief // results emitted by the Add itself
		atFlush  []brief // results emitted by Advance(MaxInt64)
		openLeft int     // OpenWindows() after the Add
	}{
		"before maxTimestamp": {"on_watermark", 4998, windowing.Aggregated, nil,
			[]brief{{key, 0, 2, 3, windowing.OnTime, 0, endOfTime}}, 1},
		"at maxTimestamp": {"on_watermark", 4999, windowing.Aggregated,
			[]brief{{key, 0, 2, 3, windowing.Late, 1, 4999}}, nil, 1},
		"1ms before cleanup": {"on_watermark", 6998, windowing.Aggregated,
			[]brief{{key, 0, 2, 3, windowing.Late, 1, 6998}}, nil, 1},
		"at cleanup":            {"on_watermark", 6999, windowing.LateEvent, nil, nil, 0},
		"1ms after cleanup":     {"on_watermark", 7000, windowing.LateEvent, nil, nil, 0},
		"on_close before close": {"on_close", 6998, windowing.Aggregated, nil, []brief{{key, 0, 2, 3, windowing.Final, 0, endOfTime}}, 1},
		"on_close at cleanup":   {"on_close", 6999, windowing.LateEvent, nil, nil, 0},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			e, c := newEngine(t, params{"tumbling", 5000, 0, 0, 2000, tt.emit}.spec(sumCount...))
			e.Add(rec(0, 0, key, fields, 1000, 1))
			e.Advance(tt.wm)
			before := len(c.got)
			out := e.Add(rec(0, 1, key, fields, 4000, 2))
			if out.Kind != tt.kind {
				t.Errorf("Add at wm %d = %+v, want kind %v", tt.wm, out, tt.kind)
			}
			if got := briefs(c.got[before:]); !slices.Equal(got, tt.fromAdd) {
				t.Errorf("Add at wm %d emitted %v, want %v", tt.wm, got, tt.fromAdd)
			}
			if n := e.OpenWindows(); n != tt.openLeft {
				t.Errorf("OpenWindows() = %d, want %d", n, tt.openLeft)
			}
			before = len(c.got)
			e.Advance(math.MaxInt64)
			if got := briefs(c.got[before:]); !slices.Equal(got, tt.atFlush) {
				t.Errorf("Advance(MaxInt64) emitted %v, want %v", got, tt.atFlush)
			}
		})
	}
}

// TestBrandNewWindowAlreadyDue: a key's first record for a window that is
// past maxTimestamp but not cleanup fires at once, Late with revision 0,
// and never gets an on-time firing.
func TestBrandNewWindowAlreadyDue(t *testing.T) {
	e, c := newEngine(t, params{"tumbling", 5000, 0, 0, 2000, "on_watermark"}.spec(sumCount...))
	a, af := textKey("a")
	b, bf := textKey("b")
	e.Add(rec(0, 0, a, af, 6000, 1))
	e.Advance(5500)
	e.Add(rec(0, 1, b, bf, 4000, 1))
	e.Advance(math.MaxInt64)
	want := []brief{{b, 0, 1, 1, windowing.Late, 0, 5500}, {a, 5000, 1, 1, windowing.OnTime, 0, endOfTime}}
	if got := briefs(c.got); !slices.Equal(got, want) {
		t.Errorf("results = %v, want %v", got, want)
	}
}

func TestRevisionsCountFirings(t *testing.T) {
	e, c := newEngine(t, params{"tumbling", 10, 0, 0, 100, "on_watermark"}.spec(sumCount...))
	key, fields := textKey("k")
	e.Add(rec(0, 0, key, fields, 1, 1))
	e.Advance(20)
	for i := range int64(3) {
		e.Add(rec(0, i+1, key, fields, 2, 1))
	}
	var revs []int64
	for _, r := range c.got {
		revs = append(revs, r.Revision)
	}
	if want := []int64{0, 1, 2, 3}; !slices.Equal(revs, want) {
		t.Errorf("revisions = %v, want %v", revs, want)
	}
}

// TestFiringOrder: due windows fire by end, then key (numbers before
// strings, numbers numerically), then partition, across partitions.
func TestFiringOrder(t *testing.T) {
	e, c := newEngine(t, params{"tumbling", 5, 0, 0, 0, "on_watermark"}.spec(sumCount...))
	type in struct {
		part int32
		key  string
		f    []record.Value
		ts   int64
	}
	n10, n10f := numKey(10)
	n2, n2f := numKey(2)
	sa, saf := textKey("a")
	sb, sbf := textKey("b")
	ins := []in{{0, sa, saf, 7}, {1, sb, sbf, 1}, {0, sb, sbf, 2}, {0, n10, n10f, 3}, {1, n2, n2f, 4}, {0, sa, saf, 0}}
	for i, r := range ins {
		e.Add(rec(r.part, int64(i), r.key, r.f, r.ts, 1))
	}
	e.Advance(math.MaxInt64)
	type fired struct {
		part  int32
		key   string
		start int64
	}
	var got []fired
	for _, r := range c.got {
		got = append(got, fired{r.Partition, r.Key, r.Window.Start})
	}
	want := []fired{{1, n2, 0}, {0, n10, 0}, {0, sa, 0}, {0, sb, 0}, {1, sb, 0}, {0, sa, 5}}
	if !slices.Equal(got, want) {
		t.Errorf("firing order = %v, want %v", got, want)
	}
}

func TestRemovePartition(t *testing.T) {
	e, c := newEngine(t, params{"sliding", 10, 5, 0, 0, "on_watermark"}.spec(sumCount...))
	key, fields := textKey("k")
	e.Add(rec(0, 0, key, fields, 3, 1))
	e.Add(rec(1, 0, key, fields, 3, 1))
	e.RemovePartition(1)
	if n := e.OpenWindows(); n != 2 {
		t.Errorf("OpenWindows() after removing partition 1 = %d, want 2", n)
	}
	e.Advance(math.MaxInt64)
	for _, r := range c.got {
		if r.Partition == 1 {
			t.Errorf("removed partition fired %+v", r)
		}
	}
	if len(c.got) != 2 {
		t.Errorf("%d results, want 2 (partition 0's two windows)", len(c.got))
	}
}

func TestEndOfTime(t *testing.T) {
	e, c := newEngine(t, params{"tumbling", 5000, 0, 0, 3_600_000, "on_watermark"}.spec(sumCount...))
	key, fields := textKey("k")
	near := int64(math.MaxInt64 - 10_000)
	e.Add(rec(0, 0, key, fields, near, 1))
	e.Add(rec(0, 1, key, fields, math.MaxInt64-1, 1))
	e.Advance(math.MaxInt64 - 1)
	if n := e.OpenWindows(); n != 2 || len(c.got) != 2 {
		t.Fatalf("at W = MaxInt64-1: OpenWindows() = %d, %d results, want 2 and 2 on-time firings", n, len(c.got))
	}
	if last := c.got[1].Window; last.End != math.MaxInt64 {
		t.Errorf("window of MaxInt64-1 = %v, want End MaxInt64", last)
	}
	if out := e.Add(rec(0, 2, key, fields, near, 1)); out.Kind != windowing.Aggregated {
		t.Errorf("Add near the end of time at W = MaxInt64-1 = %+v, want Aggregated (never cleaned up)", out)
	}
	e.Advance(math.MaxInt64)
	if n := e.OpenWindows(); n != 0 {
		t.Errorf("OpenWindows() after flush = %d, want 0", n)
	}
}

func TestAggregates(t *testing.T) {
	aggs := []windowing.Aggregate{{Fn: windowing.FnCount}, {Fn: windowing.FnSum}, {Fn: windowing.FnMin}, {Fn: windowing.FnMax}, {Fn: windowing.FnAvg},
		{Fn: windowing.FnFirst}, {Fn: windowing.FnLast}, {Fn: windowing.FnCountDistinct}, {Fn: windowing.FnQuantile, Q: 0.5}}
	e, c := newEngine(t, params{"tumbling", 100, 0, 0, 0, "on_watermark"}.spec(aggs...))
	key, fields := textKey("k")
	ins := []struct {
		ts int64
		n  float64
		x  record.Value
	}{
		{5, 4, record.Text("a")}, {3, -2, record.Text("b")}, {3, 10, record.Text("c")},
		{9, 1, record.Text("d")}, {9, 1, record.Number(1)}, {7, 2, record.Value{Num: 1, IsNum: true, Raw: "1.0"}},
	}
	for i, in := range ins {
		n := record.Number(in.n)
		e.Add(&record.Record{Offset: int64(i), Time: in.ts, Key: key, KeyFields: fields,
			Values: []record.Value{{}, n, n, n, n, in.x, in.x, in.x, n}})
	}
	e.Advance(math.MaxInt64)
	want := []record.Value{record.Number(6), record.Number(16), record.Number(-2), record.Number(10),
		record.Number(16.0 / 6), record.Text("b"), record.Number(1), record.Number(6), record.Number(1)}
	names := []string{"count", "sum", "min", "max", "avg", "first (ties: earliest arrival)",
		"last (ties: latest arrival)", "count_distinct (by Raw)", "quantile 0.5"}
	got := c.got[0].Aggregates
	for i := range want[:8] {
		if got[i] != want[i] {
			t.Errorf("%s = %+v, want %+v", names[i], got[i], want[i])
		}
	}
	if q := got[8].Num; q != 1 { // sorted -2 1 1 2 4 10: nearest rank ceil(0.5*6) = 3 is 1, exact (6 values)
		t.Errorf("quantile 0.5 = %v, want 1 exactly", q)
	}
}

func TestNewEngineRejectsUnknownFn(t *testing.T) {
	spec := params{"tumbling", 5, 0, 0, 0, "on_watermark"}.spec(windowing.Aggregate{Fn: windowing.FnCountField + 1})
	if _, err := windowing.NewEngine(spec, &collector{}); err == nil {
		t.Errorf("NewEngine(%+v) = nil error, want one", spec)
	}
}

// steadyEngine returns an untracked engine of p with a discarding sink,
// and 100 records of 10 keys for the allocation tests to feed it.
func steadyEngine(t *testing.T, p params) (*windowing.Engine, []*record.Record) {
	e, err := windowing.NewEngine(p.spec(sumCount...), discard{})
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]*record.Record, 100)
	for i := range recs {
		key, fields := numKey(float64(i % 10))
		recs[i] = rec(0, int64(i), key, fields, 0, float64(i))
	}
	return e, recs
}

// TestTumblingAddDoesNotAllocate: in steady state (keys and windows seen
// before) a tumbling Add plus Advance allocates nothing.
func TestTumblingAddDoesNotAllocate(t *testing.T) {
	e, recs := steadyEngine(t, params{"tumbling", 100, 0, 0, 0, "on_watermark"})
	ts := int64(0)
	step := func() {
		for _, r := range recs {
			r.Time = ts
			ts++
			e.Add(r)
			e.Advance(ts - 2)
		}
	}
	step()
	step()
	if allocs := testing.AllocsPerRun(20, step); allocs != 0 {
		t.Errorf("100 steady-state Add+Advance = %v allocs, want 0", allocs)
	}
}

// TestDisorderedSlidingAddDoesNotAllocate: in steady state a sliding Add
// plus Advance allocates nothing either, with records out of order by up
// to two panes and some far enough back to be added late.
func TestDisorderedSlidingAddDoesNotAllocate(t *testing.T) {
	e, recs := steadyEngine(t, params{"sliding", 60, 10, 0, 20, "on_watermark"})
	ts, maxTs, partly := int64(0), int64(0), 0
	step := func() {
		for i, r := range recs {
			r.Time = ts - int64(i*7919%20)
			if i%25 == 0 {
				r.Time = ts - 65 // behind the watermark: late for some windows
			}
			ts++
			maxTs = max(maxTs, r.Time)
			if e.Add(r).Kind == windowing.PartiallyLate {
				partly++
			}
			e.Advance(maxTs - 20)
		}
	}
	for range 5 {
		step()
	}
	if allocs := testing.AllocsPerRun(20, step); allocs != 0 {
		t.Errorf("100 steady-state disordered sliding Add+Advance = %v allocs, want 0", allocs)
	}
	if partly == 0 {
		t.Errorf("no record was partially late: the stream misses late additions")
	}
}

// TestQuantileExactAtTheEdges: the sketch's answer is clamped to the exact
// min and max, so one value, q = 0 and q = 1 come out exact.
func TestQuantileExactAtTheEdges(t *testing.T) {
	tests := map[string]struct {
		q    float64
		vals []float64
		want float64
	}{
		"one value":        {0.5, []float64{3}, 3},
		"one value, p99":   {0.99, []float64{1922.5}, 1922.5},
		"low q is the min": {0.01, []float64{7, 3.3, 12}, 3.3},
		"q 1 is the max":   {1, []float64{7, 3.3, 12.25}, 12.25},
		"negative":         {0.5, []float64{-41}, -41},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			e, c := newEngine(t, params{"sliding", 100, 50, 0, 0, "on_watermark"}.spec(windowing.Aggregate{Fn: windowing.FnQuantile, Q: tt.q}))
			key, fields := textKey("k")
			for i, v := range tt.vals {
				e.Add(&record.Record{Offset: int64(i), Time: 60, Key: key, KeyFields: fields, Values: []record.Value{record.Number(v)}})
			}
			e.Advance(math.MaxInt64)
			for _, r := range c.got {
				if got := r.Aggregates[0].Num; got != tt.want {
					t.Errorf("quantile %v of %v in %v = %v, want %v", tt.q, tt.vals, r.Window, got, tt.want)
				}
			}
			if len(c.got) != 2 {
				t.Errorf("got %d results, want 2 (two sliding windows)", len(c.got))
			}
		})
	}
}

// TestQuantileNearestRank: quantile q is the value at rank ceil(q*n) of the
// n sorted values (docs/semantics.md#aggregates), within 1%, for small and larger windows,
// negative values and zeros included.
func TestQuantileNearestRank(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64((i*37)%100) - 20 // -20..79, each once, shuffled
	}
	tests := map[string]struct {
		vals []float64
		qs   []float64
	}{
		"n=1":   {[]float64{42}, []float64{0.01, 0.5, 0.99, 1}},
		"n=2":   {[]float64{477, 100}, []float64{0.01, 0.5, 0.51, 0.99, 1}},
		"n=3":   {[]float64{0, -5, 12.5}, []float64{0.01, 0.33, 0.34, 0.5, 0.66, 0.67, 0.99, 1}},
		"n=100": {hundred, []float64{0.01, 0.07, 0.29, 0.5, 0.57, 0.9, 0.95, 0.99, 1}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			aggs := make([]windowing.Aggregate, len(tt.qs))
			for i, q := range tt.qs {
				aggs[i] = windowing.Aggregate{Fn: windowing.FnQuantile, Q: q}
			}
			e, c := newEngine(t, params{"tumbling", 1000, 0, 0, 0, "on_watermark"}.spec(aggs...))
			key, fields := textKey("k")
			for i, v := range tt.vals {
				vs := make([]record.Value, len(tt.qs))
				for j := range vs {
					vs[j] = record.Number(v)
				}
				e.Add(&record.Record{Offset: int64(i), Time: int64(i), Key: key, KeyFields: fields, Values: vs})
			}
			e.Advance(math.MaxInt64)
			sorted := slices.Sorted(slices.Values(tt.vals))
			for j, q := range tt.qs {
				rank := int(math.Ceil(math.Round(q*float64(len(sorted))*1e9) / 1e9)) // 1-based
				want := sorted[rank-1]
				if got := c.got[0].Aggregates[j].Num; math.Abs(got-want) > 0.01*math.Abs(want) {
					t.Errorf("quantile %v of %v = %v, want %v (rank %d) within 1%%", q, tt.vals, got, want, rank)
				}
			}
		})
	}
}
