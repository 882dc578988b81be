package windowing_test

import (
	"math"
	"testing"
	"time"

	"aggregator/internal/windowing"
)

// TestCalendarEdgesOfTime: the first and last milliseconds of int64 get a
// window that holds them, whatever the zone.
func TestCalendarEdgesOfTime(t *testing.T) {
	for _, zone := range calendarZones {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, unit := range []windowing.CalendarUnit{windowing.CalendarDay, windowing.CalendarWeek, windowing.CalendarMonth} {
			for _, ts := range []int64{math.MinInt64, math.MinInt64 + 1, -1, 0, math.MaxInt64 - 1, math.MaxInt64} {
				c := &windowing.Calendar{Unit: unit, Loc: loc}
				if w := c.Assign(ts); w.Start > ts || ts >= w.End && w.End != math.MaxInt64 {
					t.Errorf("Calendar{%d, %s}.Assign(%d) = %v, which does not hold it", unit, zone, ts, w)
				}
			}
		}
	}
}
