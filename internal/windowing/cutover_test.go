package windowing_test

import (
	"math"
	"testing"
	"time"

	"aggregator/internal/windowing"
)

func TestCutoverStart(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	day := func(s string) int64 {
		tm, err := time.ParseInLocation("2006-01-02 15:04", s, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	tests := map[string]struct {
		spec windowing.Spec
		t    int64
		want int64
	}{
		"tumbling, on a start":        {windowing.Spec{Kind: windowing.KindTumbling, Size: 300_000}, 600_000, 600_000},
		"tumbling, inside a window":   {windowing.Spec{Kind: windowing.KindTumbling, Size: 300_000}, 160_001, 300_000},
		"tumbling, a ms after start":  {windowing.Spec{Kind: windowing.KindTumbling, Size: 300_000}, 300_001, 600_000},
		"tumbling with offset":        {windowing.Spec{Kind: windowing.KindTumbling, Size: 10, Offset: 3}, 4, 13},
		"tumbling before the epoch":   {windowing.Spec{Kind: windowing.KindTumbling, Size: 10}, -15, -10},
		"sliding: the slide's grid":   {windowing.Spec{Kind: windowing.KindSliding, Size: 10, Slide: 4}, 5, 8},
		"sliding, on a start":         {windowing.Spec{Kind: windowing.KindSliding, Size: 10, Slide: 4}, 8, 8},
		"calendar: the next midnight": {windowing.Spec{Kind: windowing.KindCalendar, Calendar: windowing.CalendarDay, Zone: berlin}, day("2030-03-30 21:00"), day("2030-03-31 00:00")},
		"calendar, at midnight":       {windowing.Spec{Kind: windowing.KindCalendar, Calendar: windowing.CalendarDay, Zone: berlin}, day("2030-03-31 00:00"), day("2030-03-31 00:00")},
		"session: t itself":           {windowing.Spec{Kind: windowing.KindSession, Gap: 10}, 7, 7},
		"count: t itself":             {windowing.Spec{Kind: windowing.KindCount, Size: 3}, 7, 7},
		"global: t itself":            {windowing.Spec{Kind: windowing.KindGlobal}, 7, 7},
		"at the end of time":          {windowing.Spec{Kind: windowing.KindTumbling, Size: 10}, math.MaxInt64 - 1, math.MaxInt64},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tt.spec.CutoverStart(tt.t); got != tt.want {
				t.Errorf("CutoverStart(%d) = %d, want %d", tt.t, got, tt.want)
			}
		})
	}
}
