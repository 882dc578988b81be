package pipeline

import (
	"aggregator/internal/config"
	"aggregator/internal/windowing"
)

// calendarUnits maps window.calendar to the engine's units.
var calendarUnits = [...]windowing.CalendarUnit{
	config.CalendarDay: windowing.CalendarDay, config.CalendarWeek: windowing.CalendarWeek, config.CalendarMonth: windowing.CalendarMonth,
}

// aggFns maps aggregates[].fn to the engine's functions.
var aggFns = [...]windowing.Fn{
	config.FnCount: windowing.FnCount, config.FnSum: windowing.FnSum, config.FnMin: windowing.FnMin,
	config.FnMax: windowing.FnMax, config.FnAvg: windowing.FnAvg, config.FnFirst: windowing.FnFirst,
	config.FnLast: windowing.FnLast, config.FnCountDistinct: windowing.FnCountDistinct,
	config.FnQuantile: windowing.FnQuantile, config.FnTopK: windowing.FnTopK,
}

// windowKindSpec fills in the parts of s for calendar, global and count
// windows and early firings.
func windowKindSpec(w config.Window, s *windowing.Spec) {
	if u := w.CalendarUnit(); u != config.NoCalendar {
		s.Kind, s.Calendar, s.Zone = windowing.KindCalendar, calendarUnits[u], w.Zone()
	}
	switch w.Kind() {
	case config.Global:
		s.Kind = windowing.KindGlobal
	case config.Count: // size and slide are records, held as that many ms
		s.Kind, s.Timeout = windowing.KindCount, w.Timeout.Milliseconds()
	}
	s.Early = windowing.EarlySpec{Every: w.EarlyFirings.Every.Milliseconds(), Event: w.EarlyFirings.EventTime()}
}
