package pipeline

import (
	"aggregator/internal/config"
	"aggregator/internal/windowing"
)

// calendarUnits maps window.calendar to the engine's units.
var calendarUnits = map[string]windowing.CalendarUnit{
	"day": windowing.CalendarDay, "week": windowing.CalendarWeek, "month": windowing.CalendarMonth,
}

// windowKindSpec fills in the parts of s for calendar, global and count
// windows and early firings.
func windowKindSpec(w config.Window, s *windowing.Spec) {
	if w.Calendar != "" {
		s.Kind, s.Calendar, s.Zone = windowing.KindCalendar, calendarUnits[w.Calendar], w.Zone()
	}
	switch w.Type {
	case "global":
		s.Kind = windowing.KindGlobal
	case "count": // size and slide are records, held as that many ms
		s.Kind, s.Timeout = windowing.KindCount, w.Timeout.Milliseconds()
	}
	s.Early = windowing.EarlySpec{Every: w.EarlyFirings.Every.Milliseconds(), Event: w.EarlyFirings.Time == "event"}
}
