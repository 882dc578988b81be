package windowing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// folder is two-phase aggregation in miniature
// (docs/design.md#two-phase-aggregation): one source, its bounded
// watermark generator, stage 1's rule and flushes, and stage 2's engine,
// which merges each flushed group of partials at the watermark its last
// record brought.
type folder struct {
	t       *testing.T
	rng     *rand.Rand
	folds   *windowing.Folds
	eng     *windowing.Engine
	pending map[foldKey]*windowing.Partial
	order   []foldKey
	minTs   int64 // the earliest close among the pending partials
	last    int64 // the last folded record's After
	folded  int
}

type foldKey struct {
	key   string
	start int64
}

// flush merges the pending group, as stage 2 does when its check passes
// (the check must pass: one source, no history), then raises the
// watermark to the group's last After.
func (f *folder) flush() {
	if len(f.order) == 0 {
		return
	}
	var bufs [][]byte
	for _, k := range f.order {
		p := f.pending[k]
		if !f.eng.Mergeable(0, p.Start, f.last) {
			f.t.Fatalf("Mergeable(0, %d, %d) = false for a partial stage 1's rule allowed (engine watermark %d)", p.Start, f.last, f.eng.Watermark())
		}
		bufs = append(bufs, f.folds.Append(nil, p))
		f.folds.Release(p)
	}
	for _, b := range bufs {
		if err := f.eng.Merge(0, b); err != nil {
			f.t.Fatalf("Merge: %v", err)
		}
	}
	f.eng.Advance(f.last)
	clear(f.pending)
	f.order, f.minTs = f.order[:0], math.MaxInt64
}

// add is stage 1 and stage 2 for one record: folded if the rule allows
// (and a coin says so, so that singles and partials mix), else sent alone
// after the pending group.
func (f *folder) add(rec *record.Record, before, after int64) {
	if after >= f.minTs {
		f.flush() // the watermark reaches a pending pane's close
	}
	start, close := f.folds.Pane(rec.Time)
	if close > after && f.rng.IntN(8) != 0 {
		k := foldKey{rec.Key, start}
		p := f.pending[k]
		if p == nil {
			p = f.folds.Partial(rec, start)
			f.pending[k] = p
			f.order = append(f.order, k)
		}
		f.folds.Add(p, rec)
		f.minTs, f.last = min(f.minTs, close), after
		f.folded++
		if f.rng.IntN(40) == 0 {
			f.flush() // a commit
		}
		return
	}
	f.flush()
	f.eng.Advance(before)
	f.eng.Add(rec)
	f.eng.Advance(after)
}

// TestFoldMatchesRecordByRecord: the same random streams (disorder, late
// records, ties of event time, nulls, every aggregate) applied record by
// record and through folds give the same results, field for field (but
// the watermark a result fired at), in the same order.
func TestFoldMatchesRecordByRecord(t *testing.T) {
	specs := map[string]windowing.Spec{}
	for name, p := range propertyCombos {
		specs[name] = p.spec()
	}
	specs["calendar day"] = windowing.Spec{Kind: windowing.KindCalendar, Calendar: windowing.CalendarDay, Zone: time.FixedZone("X", 3600), Lateness: 3}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			folded, late := 0, 0
			for seed := range extraSeeds() {
				for _, aggs := range [][]windowing.Aggregate{allAggs, fifoAggs} {
					f, l := compareFolds(t, spec, aggs, seed)
					folded, late = folded+f, late+l
				}
			}
			if folded == 0 || late == 0 {
				t.Errorf("%d records folded, %d late: the streams test nothing", folded, late)
			}
		})
	}
}

func compareFolds(t *testing.T, spec windowing.Spec, aggs []windowing.Aggregate, seed uint64) (folded, late int) {
	t.Helper()
	spec.Aggregates = aggs
	scale := int64(1)
	if spec.Kind == windowing.KindCalendar {
		scale = 3_600_000 // an hour a step: a day holds 24
	}
	rng := rand.New(rand.NewPCG(seed, 11))
	gen := &streamGen{rng: rng, maxTs: rng.Int64N(40) - 30, gap: 3, age: max(13, spec.Size+spec.Lateness+4)}
	one, oneOut := newEngine(t, spec)
	two, twoOut := newEngine(t, spec)
	folds, err := windowing.NewFolds(spec)
	if err != nil {
		t.Fatalf("NewFolds: %v", err)
	}
	f := &folder{t: t, rng: rng, folds: folds, eng: two, pending: map[foldKey]*windowing.Partial{}, minTs: math.MaxInt64}
	const ooo = 4
	maxTs := int64(math.MinInt64)
	wm := func() int64 {
		if maxTs == math.MinInt64 {
			return math.MinInt64
		}
		return maxTs - ooo - 1
	}
	for range 400 {
		rec := gen.record()
		rec.Partition, rec.Time = 0, rec.Time*scale
		before := wm()
		maxTs = max(maxTs, rec.Time)
		after := wm()
		one.Advance(before)
		if res := one.Add(rec); res.Kind != windowing.Aggregated {
			late++
		}
		one.Advance(after)
		f.add(rec, before, after)
	}
	f.flush()
	one.Advance(endOfTime)
	two.Advance(endOfTime)
	if len(oneOut.got) != len(twoOut.got) {
		t.Fatalf("seed %d: %d results record by record, %d with folds", seed, len(oneOut.got), len(twoOut.got))
	}
	for i := range oneOut.got {
		want, got := oneOut.got[i], twoOut.got[i]
		want.Watermark, got.Watermark = 0, 0
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d, result %d:\n got %+v\nwant %+v", seed, i, got, want)
		}
	}
	return f.folded, late
}

// TestFoldQuantileOverflow: a pane's exact quantile values spill into the
// sketch at the 257th, whether it gets them one by one or in partials of
// any sizes (two partials of 200 spill at the merge), so the results are
// the same to the last bit.
func TestFoldQuantileOverflow(t *testing.T) {
	aggs := []windowing.Aggregate{{Fn: windowing.FnQuantile, Q: 0.5}, {Fn: windowing.FnQuantile, Q: 0.99}, {Fn: windowing.FnCount}}
	spec := windowing.Spec{Kind: windowing.KindTumbling, Size: 1000, Aggregates: aggs}
	for _, n := range []int{200, 256, 257, 400, 1000} {
		for _, chunk := range []int{1, 7, 200, 256, 300} {
			t.Run(fmt.Sprintf("%d values in partials of %d", n, chunk), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(n), uint64(chunk)))
				one, oneOut := newEngine(t, spec)
				two, twoOut := newEngine(t, spec)
				folds, err := windowing.NewFolds(spec)
				if err != nil {
					t.Fatal(err)
				}
				key, fields := textKey("q")
				var p *windowing.Partial
				for i := range n {
					v := record.Number(math.Round(rng.NormFloat64()*1000) / 8)
					rec := &record.Record{Time: int64(i % 1000), Key: key, KeyFields: fields, Values: []record.Value{v, v, {}}}
					one.Add(rec)
					if p == nil {
						p = folds.Partial(rec, 0)
					}
					folds.Add(p, rec)
					if p.Records == chunk || i == n-1 {
						if err := two.Merge(0, folds.Append(nil, p)); err != nil {
							t.Fatalf("Merge: %v", err)
						}
						folds.Release(p)
						p = nil
					}
				}
				one.Advance(endOfTime)
				two.Advance(endOfTime)
				if !reflect.DeepEqual(twoOut.got, oneOut.got) {
					t.Fatalf("with partials %+v, record by record %+v", twoOut.got, oneOut.got)
				}
			})
		}
	}
}

// TestMergeable: a partial merges only where adding its records would
// aggregate them on time and fire nothing.
func TestMergeable(t *testing.T) {
	sum := []windowing.Aggregate{{Fn: windowing.FnSum}, {Fn: windowing.FnCount}}
	tumbling := windowing.Spec{Kind: windowing.KindTumbling, Size: 10, Lateness: 5, Aggregates: sum}
	sliding := windowing.Spec{Kind: windowing.KindSliding, Size: 10, Slide: 5, Lateness: 5, Aggregates: sum}
	tests := map[string]struct {
		spec      windowing.Spec
		setup     func(e *windowing.Engine)
		start, wm int64
		want      bool
	}{
		"before the close":                 {tumbling, nil, 10, 18, true},
		"at the close":                     {tumbling, nil, 10, 19, false},
		"in the lateness band":             {tumbling, nil, 10, 22, false},
		"engine watermark at the close":    {tumbling, func(e *windowing.Engine) { e.Advance(19) }, 10, 0, false},
		"partition floor at the close":     {tumbling, func(e *windowing.Engine) { e.SetFloor(0, 19) }, 10, 0, false},
		"another partition's floor":        {tumbling, func(e *windowing.Engine) { e.SetFloor(1, 19) }, 10, 0, true},
		"dropped by a lower lateness":      {tumbling, func(e *windowing.Engine) { e.SetDropped(0, 24) }, 10, 0, false},
		"not a pane start":                 {tumbling, nil, 12, 0, false},
		"after the generation's cut-over":  {tumbling, func(e *windowing.Engine) { e.CutOver(10) }, 10, 0, false},
		"sliding: the earliest window due": {sliding, nil, 10, 14, false},
		"sliding: before the earliest":     {sliding, nil, 10, 13, true},
		"early firings":                    {windowing.Spec{Kind: windowing.KindTumbling, Size: 10, Early: windowing.EarlySpec{Every: 3, Event: true}, Aggregates: sum}, nil, 10, 0, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			e, _ := newEngine(t, tt.spec)
			if tt.setup != nil {
				tt.setup(e)
			}
			if got := e.Mergeable(0, tt.start, tt.wm); got != tt.want {
				t.Errorf("Mergeable(0, %d, %d) = %v, want %v", tt.start, tt.wm, got, tt.want)
			}
		})
	}
}

// TestMergeRejectsCorruptPartials: bytes Merge cannot read are an error,
// never a panic or a pane.
func TestMergeRejectsCorruptPartials(t *testing.T) {
	spec := windowing.Spec{Kind: windowing.KindTumbling, Size: 10, Aggregates: allAggs}
	folds, err := windowing.NewFolds(spec)
	if err != nil {
		t.Fatal(err)
	}
	key, fields := textKey("a")
	rec := &record.Record{Time: 3, Key: key, KeyFields: fields, Values: []record.Value{{}, record.Number(1), record.Number(1), record.Number(1), record.Number(1),
		record.Text("x"), record.Text("x"), record.Text("x"), record.Number(2), record.Number(2), record.Text("x"), record.Text("x")}}
	p := folds.Partial(rec, 0)
	folds.Add(p, rec)
	good := folds.Append(nil, p)
	for n := range len(good) {
		e, out := newEngine(t, spec)
		if err := e.Merge(0, good[:n]); err == nil {
			t.Errorf("Merge of the first %d of %d bytes = nil, want an error", n, len(good))
		}
		e.Advance(endOfTime)
		if len(out.got) != 0 {
			t.Errorf("Merge of %d bytes made a window", n)
		}
	}
	e, out := newEngine(t, spec)
	if err := e.Merge(0, good); err != nil {
		t.Fatalf("Merge of the whole partial: %v", err)
	}
	e.Advance(endOfTime)
	if len(out.got) != 1 || out.got[0].Count != 1 {
		t.Errorf("Merge of the whole partial fired %+v, want one window of 1 record", out.got)
	}
}
