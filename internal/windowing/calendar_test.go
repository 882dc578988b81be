package windowing_test

import (
	"testing"
	"time"

	"aggregator/internal/windowing"
)

// TestCalendarAssign: windows worked out by hand from the tz database's
// rules (checked on this machine with time.Time.ZoneBounds):
//   - Europe/Berlin 2030: 31 March 02:00 +01 → 03:00 +02 (a 23-hour day),
//     27 October 03:00 +02 → 02:00 +01 (25 hours).
//   - America/Havana 2030: 10 March 00:00 -05 → 01:00 -04, so that day has
//     no midnight and starts at 01:00 -04; 3 November 01:00 -04 → 00:00
//     -05, so its midnight comes twice and the day starts at the first.
//   - Asia/Beirut 2030: 31 March 00:00 +02 → 01:00 +03 (no midnight).
//   - America/Santiago 2030: 8 September 00:00 -04 → 01:00 -03 (no
//     midnight); 7 April 00:00 -03 → 23:00 -04 on the 6th (a 25-hour 6th).
//   - Australia/Lord_Howe 2030: 7 April 02:00 +11 → 01:30 +10:30 (24.5
//     hours), 6 October 02:00 +10:30 → 02:30 +11 (23.5 hours).
//   - ISO weeks start on Monday: 30 December 2030 begins 2031's week 1.
//   - 2032 is a leap year: February has 29 days.
func TestCalendarAssign(t *testing.T) {
	tests := map[string]struct {
		zone       string
		unit       windowing.CalendarUnit
		at         string // RFC 3339
		start, end string // RFC 3339 with the zone's offsets
		hours      float64
	}{
		"utc day":                    {"UTC", windowing.CalendarDay, "2030-12-01T10:10:00Z", "2030-12-01T00:00:00Z", "2030-12-02T00:00:00Z", 24},
		"utc day, last ms":           {"UTC", windowing.CalendarDay, "2030-12-01T23:59:59.999Z", "2030-12-01T00:00:00Z", "2030-12-02T00:00:00Z", 24},
		"utc day before the epoch":   {"UTC", windowing.CalendarDay, "1969-12-31T23:59:59.999Z", "1969-12-31T00:00:00Z", "1970-01-01T00:00:00Z", 24},
		"berlin plain day":           {"Europe/Berlin", windowing.CalendarDay, "2030-03-30T12:00:00+01:00", "2030-03-30T00:00:00+01:00", "2030-03-31T00:00:00+01:00", 24},
		"berlin spring day":          {"Europe/Berlin", windowing.CalendarDay, "2030-03-31T12:00:00+02:00", "2030-03-31T00:00:00+01:00", "2030-04-01T00:00:00+02:00", 23},
		"berlin spring, before jump": {"Europe/Berlin", windowing.CalendarDay, "2030-03-31T01:59:59.999+01:00", "2030-03-31T00:00:00+01:00", "2030-04-01T00:00:00+02:00", 23},
		"berlin spring, first ms":    {"Europe/Berlin", windowing.CalendarDay, "2030-03-30T23:00:00Z", "2030-03-31T00:00:00+01:00", "2030-04-01T00:00:00+02:00", 23},
		"berlin spring, last ms":     {"Europe/Berlin", windowing.CalendarDay, "2030-03-31T21:59:59.999Z", "2030-03-31T00:00:00+01:00", "2030-04-01T00:00:00+02:00", 23},
		"berlin autumn day":          {"Europe/Berlin", windowing.CalendarDay, "2030-10-27T12:00:00+01:00", "2030-10-27T00:00:00+02:00", "2030-10-28T00:00:00+01:00", 25},
		"berlin autumn, 2:30 twice":  {"Europe/Berlin", windowing.CalendarDay, "2030-10-27T02:30:00+01:00", "2030-10-27T00:00:00+02:00", "2030-10-28T00:00:00+01:00", 25},
		"berlin autumn, last ms":     {"Europe/Berlin", windowing.CalendarDay, "2030-10-27T22:59:59.999Z", "2030-10-27T00:00:00+02:00", "2030-10-28T00:00:00+01:00", 25},
		"berlin day after autumn":    {"Europe/Berlin", windowing.CalendarDay, "2030-10-27T23:00:00Z", "2030-10-28T00:00:00+01:00", "2030-10-29T00:00:00+01:00", 24},
		"havana no midnight":         {"America/Havana", windowing.CalendarDay, "2030-03-10T12:00:00-04:00", "2030-03-10T01:00:00-04:00", "2030-03-11T00:00:00-04:00", 23},
		"havana day before":          {"America/Havana", windowing.CalendarDay, "2030-03-10T04:59:59.999Z", "2030-03-09T00:00:00-05:00", "2030-03-10T01:00:00-04:00", 24},
		"havana midnight twice":      {"America/Havana", windowing.CalendarDay, "2030-11-03T00:30:00-05:00", "2030-11-03T00:00:00-04:00", "2030-11-04T00:00:00-05:00", 25},
		"havana first midnight":      {"America/Havana", windowing.CalendarDay, "2030-11-03T04:00:00Z", "2030-11-03T00:00:00-04:00", "2030-11-04T00:00:00-05:00", 25},
		"havana before it":           {"America/Havana", windowing.CalendarDay, "2030-11-03T03:59:59.999Z", "2030-11-02T00:00:00-04:00", "2030-11-03T00:00:00-04:00", 24},
		"beirut no midnight":         {"Asia/Beirut", windowing.CalendarDay, "2030-03-31T01:00:00+03:00", "2030-03-31T01:00:00+03:00", "2030-04-01T00:00:00+03:00", 23},
		"beirut day before":          {"Asia/Beirut", windowing.CalendarDay, "2030-03-30T23:59:59.999+02:00", "2030-03-30T00:00:00+02:00", "2030-03-31T01:00:00+03:00", 24},
		"santiago no midnight":       {"America/Santiago", windowing.CalendarDay, "2030-09-08T09:00:00-03:00", "2030-09-08T01:00:00-03:00", "2030-09-09T00:00:00-03:00", 23},
		"santiago 25-hour day":       {"America/Santiago", windowing.CalendarDay, "2030-04-06T23:30:00-04:00", "2030-04-06T00:00:00-03:00", "2030-04-07T00:00:00-04:00", 25},
		"lord howe 24.5 hours":       {"Australia/Lord_Howe", windowing.CalendarDay, "2030-04-07T01:45:00+10:30", "2030-04-07T00:00:00+11:00", "2030-04-08T00:00:00+10:30", 24.5},
		"lord howe 23.5 hours":       {"Australia/Lord_Howe", windowing.CalendarDay, "2030-10-06T12:00:00+11:00", "2030-10-06T00:00:00+10:30", "2030-10-07T00:00:00+11:00", 23.5},
		"iso week over new year":     {"Europe/Berlin", windowing.CalendarWeek, "2031-01-01T12:00:00+01:00", "2030-12-30T00:00:00+01:00", "2031-01-06T00:00:00+01:00", 168},
		"iso week, sunday before":    {"Europe/Berlin", windowing.CalendarWeek, "2030-12-29T23:59:59.999+01:00", "2030-12-23T00:00:00+01:00", "2030-12-30T00:00:00+01:00", 168},
		"iso week over spring":       {"Europe/Berlin", windowing.CalendarWeek, "2030-03-31T12:00:00+02:00", "2030-03-25T00:00:00+01:00", "2030-04-01T00:00:00+02:00", 167},
		"utc week, monday":           {"UTC", windowing.CalendarWeek, "2030-12-30T00:00:00Z", "2030-12-30T00:00:00Z", "2031-01-06T00:00:00Z", 168},
		"leap february":              {"UTC", windowing.CalendarMonth, "2032-02-29T12:00:00Z", "2032-02-01T00:00:00Z", "2032-03-01T00:00:00Z", 29 * 24},
		"march after leap day":       {"UTC", windowing.CalendarMonth, "2032-03-01T00:00:00Z", "2032-03-01T00:00:00Z", "2032-04-01T00:00:00Z", 31 * 24},
		"berlin leap february":       {"Europe/Berlin", windowing.CalendarMonth, "2032-02-29T23:30:00+01:00", "2032-02-01T00:00:00+01:00", "2032-03-01T00:00:00+01:00", 29 * 24},
		"plain february":             {"UTC", windowing.CalendarMonth, "2031-02-28T23:59:59.999Z", "2031-02-01T00:00:00Z", "2031-03-01T00:00:00Z", 28 * 24},
		"berlin march with spring":   {"Europe/Berlin", windowing.CalendarMonth, "2030-03-31T12:00:00+02:00", "2030-03-01T00:00:00+01:00", "2030-04-01T00:00:00+02:00", 31*24 - 1},
		"december to january":        {"Europe/Berlin", windowing.CalendarMonth, "2030-12-31T23:59:59.999+01:00", "2030-12-01T00:00:00+01:00", "2031-01-01T00:00:00+01:00", 31 * 24},
		"beirut april from jump":     {"Asia/Beirut", windowing.CalendarMonth, "2030-03-31T00:30:00Z", "2030-03-01T00:00:00+02:00", "2030-04-01T00:00:00+03:00", 31*24 - 1},
	}
	ms := func(s string) int64 {
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return ts.UnixMilli()
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			loc, err := time.LoadLocation(tt.zone)
			if err != nil {
				t.Fatal(err)
			}
			c := &windowing.Calendar{Unit: tt.unit, Loc: loc}
			want := windowing.Window{Start: ms(tt.start), End: ms(tt.end)}
			if got := c.Assign(ms(tt.at)); got != want {
				t.Errorf("Calendar{%d, %s}.Assign(%s) = [%s, %s), want [%s, %s)", tt.unit, tt.zone, tt.at,
					time.UnixMilli(got.Start).In(loc).Format(time.RFC3339), time.UnixMilli(got.End).In(loc).Format(time.RFC3339), tt.start, tt.end)
			}
			if h := float64(want.End-want.Start) / 3_600_000; h != tt.hours {
				t.Errorf("[%s, %s) is %v hours, want %v (the test's arithmetic)", tt.start, tt.end, h, tt.hours)
			}
			// The cached window answers alike; a neighbour's does not leak.
			if got := c.Assign(want.Start); got != want {
				t.Errorf("Assign(start) after Assign(%s) = %v, want %v", tt.at, got, want)
			}
			if got := c.Assign(want.End); got.Start != want.End {
				t.Errorf("Assign(end) = %v, want a window starting at %d", got, want.End)
			}
			if got := c.Assign(want.Start - 1); got.End != want.Start {
				t.Errorf("Assign(start-1) = %v, want a window ending at %d", got, want.Start)
			}
		})
	}
}
