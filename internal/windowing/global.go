package windowing

import "math"

// globalWindow is the one window of every key of a global window (docs/windows.md#global-windows-a-running-aggregate-per-key,
// Flink's GlobalWindows): it never ends, so nothing is late or dropped
// before the end of input. Sessions runs global windows: every record of a
// key falls inside its one session, no timer fires it on time, and only
// early firings emit it, plus one at the end of input (math.MaxInt64) if
// it changed since its last. Results of global windows have no bounds to
// show: the encoder writes them as null.
var globalWindow = Window{Start: math.MinInt64, End: math.MaxInt64}

// IsGlobal reports whether w is the window of a global window.
func (w Window) IsGlobal() bool { return w == globalWindow }

// window returns the window of a record at t: the global window, or the
// session window [t, t+gap) with the record's own gap if it has one.
func (s *Sessions) window(t, gap int64) Window {
	if s.global {
		return globalWindow
	}
	if gap <= 0 {
		gap = s.gap
	}
	return Window{Start: t, End: addSat(t, gap)}
}
