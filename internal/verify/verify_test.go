package verify

import (
	"math"
	"testing"

	"aggregator/internal/config"
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
