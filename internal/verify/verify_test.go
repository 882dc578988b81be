package verify

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

func TestEqual(t *testing.T) {
	tests := map[string]struct {
		a, b any
		want bool
	}{
		"same":                  {map[string]any{"count": 3.0, "aggregates": map[string]any{"s": 0.3}}, map[string]any{"count": 3.0, "aggregates": map[string]any{"s": 0.3}}, true},
		"sum in another order":  {map[string]any{"s": 0.1 + 0.2 + 0.3}, map[string]any{"s": 0.3 + 0.2 + 0.1}, true},
		"another count":         {map[string]any{"count": 3.0}, map[string]any{"count": 4.0}, false},
		"a field more":          {map[string]any{"count": 3.0}, map[string]any{"count": 3.0, "x": nil}, false},
		"number and string":     {map[string]any{"v": 1.0}, map[string]any{"v": "1"}, false},
		"null and 0":            {map[string]any{"v": nil}, map[string]any{"v": 0.0}, false},
		"a relative 1e-6 apart": {1.0, 1.000001, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := equal(tt.a, tt.b); got != tt.want {
				t.Errorf("equal(%v, %v) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
		})
	}
}

// TestJustified: a late event is justified when its recorded watermark is
// at or past the cleanup time of the window it missed (end - 1 +
// allowed_lateness), that window holds its event time, and the event time
// is the record's.
func TestJustified(t *testing.T) {
	cfg, err := config.Parse([]byte(`
source: {key: [sid], timestamp: {field: t, layout: unix_ms}}
window: {type: tumbling, size: 5s, allowed_lateness: 2s}
aggregates: [{name: n, fn: count}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg, nil, 1, Whole, 10)
	if err != nil {
		t.Fatal(err)
	}
	w := windowing.Window{Start: 0, End: 5000} // cleanup time 6999
	tests := map[string]struct {
		l    Late
		t    int64
		want bool
	}{
		"at the cleanup time":  {Late{EventTime: 3000, Watermark: 6999, Missed: w}, 3000, true},
		"past it":              {Late{EventTime: 3000, Watermark: 9000, Missed: w}, 3000, true},
		"before it":            {Late{EventTime: 3000, Watermark: 6998, Missed: w}, 3000, false},
		"another event time":   {Late{EventTime: 3000, Watermark: 9000, Missed: w}, 3001, false},
		"a window without it":  {Late{EventTime: 6000, Watermark: 9000, Missed: w}, 6000, false},
		"the lowest watermark": {Late{EventTime: 3000, Watermark: math.MinInt64, Missed: w}, 3000, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := c.justified(tt.l, tt.t); got != tt.want {
				t.Errorf("justified(%+v, %d) = %v, want %v", tt.l, tt.t, got, tt.want)
			}
		})
	}
}

// comparerCase is a window [0 s, 5 s) of key {"sid":"a"} that the service
// wrote with count found, and the recomputation with count expected;
// record r (offset 7, event time 3 s) was judged late by the service when
// liveLate (at watermark liveW), and by the recomputation when ownLate.
type comparerCase struct {
	found, expected int64
	liveLate        bool
	liveW           int64
	ownLate         bool
}

func runComparer(t *testing.T, cc comparerCase) (Summary, []Diff) {
	t.Helper()
	cfg, err := config.Parse([]byte(`
source: {key: [sid], timestamp: {field: t, layout: unix_ms}}
window: {type: tumbling, size: 5s, allowed_lateness: 2s}
aggregates: [{name: n, fn: count}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg, nil, 1, Whole, 10)
	if err != nil {
		t.Fatal(err)
	}
	w := windowing.Window{Start: 0, End: 5000}
	result := func(count int64) *windowing.Result {
		return &windowing.Result{Key: `{"sid":"a"}`, Window: w, Count: count,
			Aggregates: []record.Value{{Num: float64(count), Raw: fmt.Sprint(count), IsNum: true}}}
	}
	enc := producer.EncoderFor(cfg)
	if err := c.FoundResult(enc.AppendKey(nil, result(cc.found)), enc.AppendResult(nil, result(cc.found)), []byte("0")); err != nil {
		t.Fatal(err)
	}
	in := record.Input{Topic: "calls", Offset: 7, Value: []byte(`{"sid":"a","t":3000}`)}
	if cc.liveLate {
		c.FoundLate(Late{Source: Source{"calls", 0, 7}, EventTime: 3000, Watermark: cc.liveW, Missed: w})
	}
	var rd ready.Ready
	if cc.ownLate {
		rd.Outputs = append(rd.Outputs, ready.Output{Kind: ready.Late, Event: &ready.Event{In: in, EventTime: 3000, Watermark: 9000, Missed: w}})
	}
	c.Record(&in, &rd, 9000)
	// The window's firing comes with a later record; the watermark at the
	// end closes it (cleanup time 6999).
	next := record.Input{Topic: "calls", Offset: 8, Value: []byte(`{"sid":"a","t":12000}`)}
	c.Record(&next, &ready.Ready{Outputs: []ready.Output{{Kind: ready.Result, Result: *result(cc.expected)}}}, 11000)
	return c.Finish(11000, 0), c.Diffs()
}

// TestComparerTiming: the four ways a record's lateness can differ
// between the service and the recomputation, on one window.
func TestComparerTiming(t *testing.T) {
	tests := map[string]struct {
		cc                              comparerCase
		kind                            string // the one difference; "" for none
		windowsExplained, lateExplained int
	}{
		// Late live at a watermark past the window's cleanup time, on time
		// here: explained, with the window it changed.
		"late live, justified": {comparerCase{found: 2, expected: 3, liveLate: true, liveW: 8000}, "", 1, 1},
		// The same at a watermark before the cleanup time: unexplained,
		// and the window differs.
		"late live, unjustified": {comparerCase{found: 2, expected: 3, liveLate: true, liveW: 5000}, LateUnexpected, 0, 0},
		// Late here, on time live (its window holds it): explained.
		"late here, the window shows it live": {comparerCase{found: 3, expected: 2, ownLate: true}, "", 1, 1},
		// Late here, and the window is equal: the late event is gone.
		"late here, late event missing": {comparerCase{found: 2, expected: 2, ownLate: true}, LateMissing, 0, 0},
		"both late":                     {comparerCase{found: 2, expected: 2, liveLate: true, liveW: 8000, ownLate: true}, "", 0, 0},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s, diffs := runComparer(t, tt.cc)
			var kinds []string
			for _, d := range diffs {
				kinds = append(kinds, d.Kind)
			}
			wantUnexplained := 0
			if tt.kind != "" {
				wantUnexplained = 1
				if tt.kind == LateUnexpected {
					wantUnexplained = 2 // and the window it would change
				}
			}
			if s.Unexplained != wantUnexplained || (tt.kind != "" && !slices.Contains(kinds, tt.kind)) ||
				s.Windows.ExplainedByTiming != tt.windowsExplained || s.Late.ExplainedByTiming != tt.lateExplained {
				t.Errorf("summary %+v, differences %v; want %d unexplained (%q), %d windows and %d late events explained",
					s, kinds, wantUnexplained, tt.kind, tt.windowsExplained, tt.lateExplained)
			}
		})
	}
}

// TestCountWindowsInARange: with --from a count window's numbering cannot
// be matched (it starts at a key's first record, which the range may not
// show): the recomputed one is left out once, the found one not kept.
func TestCountWindowsInARange(t *testing.T) {
	cfg, err := config.Parse([]byte(`
source: {key: [sid], timestamp: {field: t, layout: unix_ms}}
window: {type: count, size: 2}
aggregates: [{name: n, fn: count}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg, nil, 1, Range{From: 0, To: math.MaxInt64}, 10)
	if err != nil {
		t.Fatal(err)
	}
	r := windowing.Result{Key: `{"sid":"a"}`, Window: windowing.Window{Start: math.MinInt64, End: math.MaxInt64}, Count: 2,
		Aggregates: []record.Value{{Num: 2, Raw: "2", IsNum: true}}, Seq: 4}
	if !r.Window.IsGlobal() {
		t.Fatalf("%v is not the global window count windows carry", r.Window)
	}
	enc := producer.EncoderFor(cfg)
	if err := c.FoundResult(enc.AppendKey(nil, &r), enc.AppendResult(nil, &r), []byte("0")); err != nil {
		t.Fatal(err)
	}
	in := record.Input{Topic: "calls", Value: []byte(`{"sid":"a","t":1}`)}
	c.Record(&in, &ready.Ready{Outputs: []ready.Output{{Kind: ready.Result, Result: r}}}, 0)
	if s := c.Finish(0, 0); s.LeftOut[NoBounds] != 1 || s.Windows.Compared != 0 || s.Unexplained != 0 {
		t.Errorf("summary %+v, want one count window left out, none compared", s)
	}
}

// genFixture is a Comparer over two generations of one state partition
// (by_key, partition 0): version 1 with shape1 and one aggregate, version
// 2 with shape2 and two, cut over at cut (the oldest's cut-over is
// oldest: math.MinInt64 for a partition's first generation). Only the
// generations listed in live are in the changelog.
type genFixture struct {
	c    *Comparer
	cfgs []config.Config
}

func newGenFixture(t *testing.T, shape1, shape2 string, oldest, cut int64, live ...int) *genFixture {
	t.Helper()
	parse := func(shape, aggs string, version int) config.Config {
		cfg, err := config.Parse(fmt.Appendf(nil, `
source: {key: [sid], timestamp: {field: t, layout: unix_ms}}
window: {%s}
aggregates: [%s]
state: {config_version: %d}
`, shape, aggs, version), nil)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	all := []config.Config{parse(shape1, "{name: n, fn: count}", 1), parse(shape2, "{name: n, fn: count}, {name: m, fn: max, field: t}", 2)}
	cuts := []int64{oldest, cut}
	f := &genFixture{}
	g := &Generations{Seams: [][]Seam{nil}}
	for _, i := range live {
		g.Seams[0] = append(g.Seams[0], Seam{Gen: len(g.Gens), Cutover: cuts[i]})
		g.Gens = append(g.Gens, Generation{Version: int64(i + 1), Config: all[i]})
		f.cfgs = append(f.cfgs, all[i])
	}
	if g.Trivial() {
		t.Fatalf("generations %+v are trivial", g)
	}
	c, err := NewGenerations(all[1], g, nil, 1, Whole, 10)
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	return f
}

// result is a firing of generation i's recomputation for key "a".
func (f *genFixture) result(i int, w windowing.Window, count int64) ready.Output {
	r := windowing.Result{Key: `{"sid":"a"}`, Window: w, Count: count, Seq: 0}
	for range f.cfgs[i].Aggregates {
		r.Aggregates = append(r.Aggregates, record.Value{Num: float64(count), Raw: fmt.Sprint(count), IsNum: true})
	}
	return ready.Output{Kind: ready.Result, Result: r}
}

// found writes out's result, as generation i's, on the results topic.
func (f *genFixture) found(t *testing.T, i int, out ready.Output, version string) {
	t.Helper()
	enc := producer.EncoderFor(f.cfgs[i])
	if err := f.c.FoundResult(enc.AppendKey(nil, &out.Result), enc.AppendResult(nil, &out.Result), []byte(version)); err != nil {
		t.Fatal(err)
	}
}

// record feeds a record of key "a" at t, with what each generation's
// recomputation emitted.
func (f *genFixture) record(offset, t int64, wm int64, outs ...[]ready.Output) {
	in := record.Input{Topic: "calls", Offset: offset, Value: fmt.Appendf(nil, `{"sid":"a","t":%d}`, t)}
	rds := make([]ready.Ready, len(outs))
	for i := range outs {
		rds[i].Outputs = outs[i]
	}
	f.c.RecordGenerations(&in, rds, wm)
}

// TestGenerationsOwnWindows: each generation's recomputation is compared
// for the windows its generation owns (by start, against the cut-over);
// the other's recomputation of the same times is not; the results are
// decoded under their own generation's aggregates.
func TestGenerationsOwnWindows(t *testing.T) {
	f := newGenFixture(t, "type: tumbling, size: 5s, allowed_lateness: 0s", "type: tumbling, size: 10s, allowed_lateness: 0s", math.MinInt64, 20_000, 0, 1)
	old := f.result(0, windowing.Window{Start: 0, End: 5000}, 2)
	f.found(t, 0, old, "1")
	late := f.result(1, windowing.Window{Start: 20_000, End: 30_000}, 3)
	f.found(t, 1, late, "2")
	f.record(0, 1000, 0, nil, nil)
	f.record(1, 21_000, 6000,
		[]ready.Output{old, f.result(0, windowing.Window{Start: 20_000, End: 25_000}, 9)},
		[]ready.Output{f.result(1, windowing.Window{Start: 0, End: 10_000}, 9), late})
	s := f.c.Finish(40_000, 0)
	if s.Windows.Compared != 2 || s.Windows.Equal != 2 || s.Unexplained != 0 || s.ByGeneration["1"] != 1 || s.ByGeneration["2"] != 1 {
		t.Errorf("summary %+v, differences %v; want one window of each generation compared and equal", s, f.c.Diffs())
	}
}

// TestGenerationsRetired: the changelog holds generation 2 only (cut
// over at 20 s): windows before it are left out, a result of version 1
// is counted apart and left out, and a late event of a record before the
// cut-over is not judged; a result of generation 2's that differs is.
func TestGenerationsRetired(t *testing.T) {
	f := newGenFixture(t, "type: tumbling, size: 5s, allowed_lateness: 0s", "type: tumbling, size: 10s, allowed_lateness: 0s", math.MinInt64, 20_000, 1)
	retired := f.result(0, windowing.Window{Start: 0, End: 5000}, 2) // encoded as generation 2's: its shape is gone
	f.found(t, 0, retired, "1")
	ours := f.result(0, windowing.Window{Start: 20_000, End: 30_000}, 3)
	f.found(t, 0, ours, "2")
	f.c.FoundLate(Late{Source: Source{"calls", 0, 0}, EventTime: 1000, Watermark: 30_000, Missed: windowing.Window{Start: 0, End: 10_000}})
	f.record(0, 1000, 0, nil)
	f.record(1, 21_000, 6000, []ready.Output{f.result(0, windowing.Window{Start: 0, End: 10_000}, 2), f.result(0, windowing.Window{Start: 20_000, End: 30_000}, 4)})
	s := f.c.Finish(40_000, 0)
	if s.OtherVersions["1"] != 1 || s.LeftOut[Retired] != 2 || s.Late.NotRecomputed != 1 || s.Late.Unexpected != 0 ||
		s.Windows.Differing != 1 || s.Unexplained != 1 {
		t.Errorf("summary %+v, differences %v; want 1 result of version 1, 2 windows left out as retired, 1 late event not judged, 1 window differing", s, f.c.Diffs())
	}
}

// TestGenerationsSessionAtCutover: a session the recomputation extends
// across the cut-over is left out, once, with the results of the key
// that overlap it (the seam cut them live); sessions on one side are
// compared.
func TestGenerationsSessionAtCutover(t *testing.T) {
	f := newGenFixture(t, "type: session, gap: 5s, allowed_lateness: 0s", "type: session, gap: 5s, allowed_lateness: 0s", math.MinInt64, 10_000, 0, 1)
	span := windowing.Window{Start: 6000, End: 17_000}
	f.found(t, 0, f.result(0, windowing.Window{Start: 6000, End: 11_000}, 1), "1")
	f.found(t, 1, f.result(1, windowing.Window{Start: 12_000, End: 17_000}, 1), "2")
	before := f.result(0, windowing.Window{Start: 0, End: 5000}, 1)
	f.found(t, 0, before, "1")
	f.record(0, 6000, 0, nil, nil)
	f.record(1, 12_000, 20_000, []ready.Output{before, f.result(0, span, 2)}, []ready.Output{f.result(1, span, 2)})
	s := f.c.Finish(30_000, 0)
	if s.LeftOut[SessionAtCutover] != 3 || s.Windows.Compared != 1 || s.Windows.Equal != 1 || s.Unexplained != 0 {
		t.Errorf("summary %+v, differences %v; want the recomputed session and the 2 found ones overlapping it left out, 1 compared", s, f.c.Diffs())
	}
}

// TestGenerationsCountWindows: count windows of a partition that cut
// over are left out, recomputed or found.
func TestGenerationsCountWindows(t *testing.T) {
	f := newGenFixture(t, "type: count, size: 2", "type: count, size: 3", math.MinInt64, 10_000, 0, 1)
	global := windowing.Window{Start: math.MinInt64, End: math.MaxInt64}
	f.found(t, 0, f.result(0, global, 2), "1")
	f.record(0, 6000, 0, []ready.Output{f.result(0, global, 2)}, []ready.Output{f.result(1, global, 2)})
	s := f.c.Finish(30_000, 0)
	if s.LeftOut[CountGenerations] != 2 || s.Windows.Compared != 0 || s.Unexplained != 0 {
		t.Errorf("summary %+v, differences %v; want the recomputed and the found count window left out", s, f.c.Diffs())
	}
}

// TestGenerationsJudgement: a record is late when the generation that
// owns its time judged it late, a dead letter when every generation did
// or the one that owns its time did.
func TestGenerationsJudgement(t *testing.T) {
	f := newGenFixture(t, "type: tumbling, size: 5s, allowed_lateness: 0s", "type: tumbling, size: 10s, allowed_lateness: 0s", math.MinInt64, 20_000, 0, 1)
	lateOut := func(t int64) ready.Output {
		return ready.Output{Kind: ready.Late, Event: &ready.Event{EventTime: t, Watermark: 50_000}}
	}
	dead := ready.Output{Kind: ready.DeadLetter}
	f.c.FoundLate(Late{Source: Source{"calls", 0, 1}, EventTime: 21_000, Watermark: 50_000, Missed: windowing.Window{Start: 20_000, End: 30_000}})
	f.c.FoundDeadLetter(Source{"calls", 0, 2})
	f.c.FoundDeadLetter(Source{"calls", 0, 3})
	f.record(0, 21_000, 0, []ready.Output{lateOut(21_000)}, nil)     // late for generation 1 only, which does not own 21 s: on time
	f.record(1, 21_000, 0, nil, []ready.Output{lateOut(21_000)})     // late for generation 2, its owner: late, as found
	f.record(2, 1000, 0, []ready.Output{dead}, []ready.Output{dead}) // a dead letter for both: as found
	f.record(3, 1000, 0, []ready.Output{dead}, nil)                  // for generation 1, which owns 1 s: a dead letter, as found
	f.record(4, 1000, 0, nil, []ready.Output{dead})                  // for generation 2 only, which does not own 1 s: not a dead letter
	s := f.c.Finish(0, 0)
	if s.Late.Equal != 1 || s.DeadLetters.Equal != 2 || s.Unexplained != 0 {
		t.Errorf("summary %+v, differences %v; want 1 late event and 2 dead letters equal, nothing else", s, f.c.Diffs())
	}
}

// TestPartitionWatermarks: with watermark.scope partition (by_key) a
// window closes at its own partition's watermark, not at another's.
func TestPartitionWatermarks(t *testing.T) {
	cfg, err := config.Parse([]byte(`
source: {key: [sid], partitioning: by_key, timestamp: {field: t, layout: unix_ms}}
watermark: {scope: partition}
window: {type: tumbling, size: 5s, allowed_lateness: 0s}
aggregates: [{name: n, fn: count}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg, nil, 2, Whole, 10)
	if err != nil {
		t.Fatal(err)
	}
	r := windowing.Result{Partition: 1, Key: `{"sid":"b"}`, Window: windowing.Window{Start: 0, End: 5000}, Count: 1,
		Aggregates: []record.Value{{Num: 1, Raw: "1", IsNum: true}}}
	in := func(p int32, off int64, v string) *record.Input {
		return &record.Input{Topic: "calls", Partition: p, KafkaPartition: p, Offset: off, Value: []byte(v)}
	}
	c.Record(in(1, 0, `{"sid":"b","t":1000}`), &ready.Ready{Outputs: []ready.Output{{Kind: ready.Result, Result: r}}}, 0)
	c.Record(in(0, 0, `{"sid":"a","t":10000}`), &ready.Ready{}, 9000) // partition 0's watermark
	if n := c.s.Windows.Compared; n != 0 {
		t.Fatalf("partition 0's watermark closed partition 1's window: %d compared", n)
	}
	c.Record(in(1, 1, `{"sid":"b","t":10000}`), &ready.Ready{}, 9000) // partition 1's
	if n := c.s.Windows.Compared; n != 1 {
		t.Errorf("partition 1's watermark past its window's end: %d compared, want 1", n)
	}
}
