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
	if err := c.FoundResult(enc.AppendKey(nil, result(cc.found)), enc.AppendResult(nil, result(cc.found)), "0"); err != nil {
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
	if err := c.FoundResult(enc.AppendKey(nil, &r), enc.AppendResult(nil, &r), "0"); err != nil {
		t.Fatal(err)
	}
	in := record.Input{Topic: "calls", Value: []byte(`{"sid":"a","t":1}`)}
	c.Record(&in, &ready.Ready{Outputs: []ready.Output{{Kind: ready.Result, Result: r}}}, 0)
	if s := c.Finish(0, 0); s.LeftOut[NoBounds] != 1 || s.Windows.Compared != 0 || s.Unexplained != 0 {
		t.Errorf("summary %+v, want one count window left out, none compared", s)
	}
}
