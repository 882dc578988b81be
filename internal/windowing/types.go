package windowing

import (
	"math"

	"aggregator/internal/record"
)

// Window is the half-open event-time interval [Start, End), in ms.
type Window struct{ Start, End int64 }

// MaxTimestamp is the last millisecond that belongs to w.
func (w Window) MaxTimestamp() int64 { return w.End - 1 }

// CleanupTime is when w is dropped: MaxTimestamp + lateness, saturating at
// math.MaxInt64 so a window whose cleanup would overflow is never dropped.
func (w Window) CleanupTime(lateness int64) int64 {
	m := w.MaxTimestamp()
	if m > math.MaxInt64-lateness {
		return math.MaxInt64
	}
	return m + lateness
}

// Firing says why a result was emitted.
type Firing uint8

const (
	OnTime Firing = iota // the watermark passed the window's MaxTimestamp
	Late                 // an accepted late record changed a window that had fired (or was already due)
	Final                // emit on_close: the window's one result, at its cleanup time
	// Retract withdraws a session that fired and was then merged into a
	// new one (docs/semantics.md#sessions): only Partition, Key and Window are set; it is a
	// tombstone under the session's Kafka key.
	Retract
	// Early is an early firing (docs/windows.md#early-firings-results-before-a-window-is-due): a window not due yet that took
	// records since its last firing, at a tick of window.early_firings.
	Early
	// Timeout is a partial count window fired at its timeout.
	Timeout
)

// Firings are every Firing, for metrics.
var Firings = []Firing{OnTime, Late, Final, Retract, Early, Timeout}

func (f Firing) String() string {
	switch f {
	case OnTime:
		return "on_time"
	case Late:
		return "late"
	case Retract:
		return "retract"
	case Early:
		return "early"
	case Timeout:
		return "timeout"
	}
	return "final"
}

// Result is one firing of one key's window. A Sink gets a pointer that is
// valid only during the call: it must copy or encode what it keeps.
type Result struct {
	Partition  int32
	Key        string // the group key's JSON object, as in record.Record.Key
	Window     Window
	Count      int64
	Aggregates []record.Value // one per configured aggregate, in order
	Firing     Firing
	Revision   int64 // firings of this (key, window) before this one
	Watermark  int64 // the merged watermark at the firing
	Seq        int64 // count windows: the window's index for its key (with a slide, the firing's)
	// Generation is the state.config_version of the generation of
	// windows that computed it (docs/results.md#the-results-topic): the core sets it, an operator
	// leaves it 0.
	Generation int64
}

// Sink receives results in emission order.
type Sink interface {
	Emit(r *Result)
}

// Outcome is what became of one input record; every record has
// exactly one. An operator's Add returns the first three; the core decides
// the others before a record reaches an operator. The one enum of record
// outcomes (the records_total metric's label).
type Outcome uint8

const (
	Aggregated    Outcome = iota // added to every window it belongs to
	PartiallyLate                // added to some windows; others were past cleanup
	LateEvent                    // past cleanup for every window: goes to the late topic
	Filtered                     // removed by source.filter
	Marker                       // a punctuated watermark marker
	DeadLetter                   // could not be decoded, or its time is in the future
	// OtherGeneration: the record belongs in no window of the operator's
	// generation (docs/changing-config.md#generations-and-the-cut-over: before its cut-over, or at or after the
	// cut-over of the next; count windows after CutOver); another
	// generation's windows take it. Never a record's outcome: the core
	// combines the outcomes of every live generation. Not in Outcomes.
	OtherGeneration
)

var outcomeNames = [...]string{"aggregated", "partially_late", "late", "filtered", "marker", "dead_letter", "other_generation"}

// String is the outcome's metric label value.
func (o Outcome) String() string { return outcomeNames[o] }

// Outcomes lists every outcome, for pre-creating metric series.
func Outcomes() []Outcome {
	return []Outcome{Aggregated, PartiallyLate, LateEvent, Filtered, Marker, DeadLetter}
}

// AddResult is what Engine.Add did with a record. For a LateEvent, Missed is
// the latest window the record belonged to (the one it missed most narrowly).
type AddResult struct {
	Kind   Outcome
	Missed Window
}

// firedBy is flagFired unless f is an early firing.
func firedBy(f Firing) uint8 {
	if f == Early {
		return 0
	}
	return flagFired
}
