package windowing_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"aggregator/internal/windowing"
)

// TestGoldenCalls is docs/semantics.md#tumbling-windows-with-allowed-lateness (000_*) fed to the engine directly, with
// the bounded watermark (max event time - 0 - 1) computed here.
func TestGoldenCalls(t *testing.T) {
	at := func(s string) int64 {
		ts, err := time.Parse("2006-01-02 15:04:05", "2030-12-01 "+s)
		if err != nil {
			t.Fatal(err)
		}
		return ts.UnixMilli()
	}
	times := []string{"10:10:01", "10:10:02", "10:10:03", "10:10:04", "10:10:05",
		"10:10:04.456", "10:10:04.888", "10:10:07", "10:10:04.989", "10:10:10"}
	key, fields := textKey("sid_1")
	w0, w5, w10 := at("10:10:00"), at("10:10:05"), at("10:10:10")
	tests := map[string]struct {
		lateness int64
		want     []brief
		late     []int // indexes of the late events
	}{
		"lateness 0s": {0, []brief{
			{key, w0, 4, 4, windowing.OnTime, 0, w5 - 1},
			{key, w5, 2, 2, windowing.OnTime, 0, w10 - 1},
			{key, w10, 1, 1, windowing.OnTime, 0, endOfTime},
		}, []int{5, 6, 8}},
		"lateness 2s": {2000, []brief{
			{key, w0, 4, 4, windowing.OnTime, 0, w5 - 1},
			{key, w0, 5, 5, windowing.Late, 1, w5 - 1},
			{key, w0, 6, 6, windowing.Late, 2, w5 - 1},
			{key, w5, 2, 2, windowing.OnTime, 0, w10 - 1},
			{key, w10, 1, 1, windowing.OnTime, 0, endOfTime},
		}, []int{8}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			e, c := newEngine(t, params{"tumbling", 5000, 0, 0, tt.lateness, "on_watermark"}.spec(sumCount...))
			var late []int
			maxTs := int64(math.MinInt64)
			for i, s := range times {
				out := e.Add(rec(0, int64(i), key, fields, at(s), 1))
				if out.Kind == windowing.LateEvent {
					late = append(late, i)
					if want := (windowing.Window{Start: w0, End: w5}); out.Missed != want {
						t.Errorf("Add(line %d).Missed = %v, want %v", i, out.Missed, want)
					}
				}
				maxTs = max(maxTs, at(s))
				e.Advance(maxTs - 1)
			}
			e.Advance(math.MaxInt64)
			if got := briefs(c.got); !slices.Equal(got, tt.want) {
				t.Errorf("results = %v, want %v", got, tt.want)
			}
			if !slices.Equal(late, tt.late) {
				t.Errorf("late events at lines %v, want %v", late, tt.late)
			}
			if e.OpenWindows() != 0 {
				t.Errorf("OpenWindows() after flush = %d, want 0", e.OpenWindows())
			}
		})
	}
}
