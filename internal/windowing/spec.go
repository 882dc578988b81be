package windowing

import (
	"math"
	"time"
)

// Kind is a window type (docs/semantics.md#windows, docs/windows.md).
type Kind uint8

const (
	KindTumbling Kind = iota // fixed, non-overlapping windows of Size
	KindSliding              // windows of Size starting every Slide
	KindSession              // per key, merged [t, t+gap) windows
	KindCalendar             // tumbling local days, weeks or months in a time zone (run by Engine)
	KindGlobal               // one window per key that never ends, fired by early firings (run by Sessions)
	KindCount                // windows of Size records every Slide records (run by Counts)
)

// Spec is what the engine needs of the configuration, in ms. It is built
// once from a config that config.Load has validated (the one place that
// checks ranges); the engine takes it as given.
type Spec struct {
	Kind   Kind
	Size   int64 // tumbling and sliding; count: records
	Slide  int64 // sliding only; tumbling windows slide by Size; count: records (0: Size)
	Offset int64 // tumbling and sliding
	// Gap is a session's default gap: a record's window is [t, t+Gap)
	// unless the record carries its own (record.Record.Gap > 0).
	Gap int64
	// Calendar and Zone are a calendar window's unit and time zone.
	Calendar   CalendarUnit
	Zone       *time.Location
	Timeout    int64 // count windows without a slide: ms, 0 = none
	Lateness   int64
	OnClose    bool // emit on_close: one Final firing per window, at its cleanup time
	Early      EarlySpec
	Aggregates []Aggregate
	// From, when FromSet, is the cut-over T of the generation of windows
	// the operator computes (docs/changing-config.md#where-t-falls): it creates no window that starts
	// before T (sessions and global windows: it takes no record before T).
	// Count windows are cut by arrival: they take every record given.
	// Add returns OtherGeneration for a record outside. See CutOver for
	// the other end.
	From    int64
	FromSet bool
}

// from is the earliest window start the spec's generation creates.
func (s Spec) from() int64 {
	if s.FromSet {
		return s.From
	}
	return math.MinInt64
}

// Aggregate is one configured aggregate function; Q is FnQuantile's
// rank, in (0, 1]; K is how many values FnTopK reports (K > 0).
type Aggregate struct {
	Fn Fn
	Q  float64
	K  int
}
