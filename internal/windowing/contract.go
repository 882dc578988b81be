package windowing

import "aggregator/internal/record"

// Operator is the contract of a window operator, as the core drives it:
// Engine (tumbling, sliding and calendar windows), Sessions (session and
// global windows) and Counts (count windows) keep it, and so must the kinds
// that come next. Results go to the Sink the operator was made
// with, in emission order, during the call that fires them.
type Operator interface {
	// Add assigns a record to its windows against the current watermark.
	Add(rec *record.Record) AddResult
	// Advance fires and drops what the merged watermark wm makes due; it
	// is ignored unless wm is above the current one.
	Advance(wm int64)
	// Watermark is the merged watermark the operator has acted on.
	Watermark() int64
	// Judged is the watermark the partition's records are judged by: at
	// least its floor (SetFloor).
	Judged(partition int32) int64
	// SetFloor sets the watermark below which a partition's records are
	// late whatever the merged watermark (a restored partition's).
	SetFloor(partition int32, wm int64)
	// SetDropped makes a partition's records late for every window whose
	// cleanup time is at or below wm, firing nothing by it (the windows a
	// lower allowed_lateness had dropped before a restart).
	SetDropped(partition int32, wm int64)
	// Rewind takes the watermark back to wm for a partition restored
	// behind it; the partitions in keep go on being judged as before.
	Rewind(wm int64, keep []int32)
	// OpenWindows counts open (key, window) pairs.
	OpenWindows() int
	// RemovePartition drops a revoked partition's state without firing.
	RemovePartition(partition int32)
	// ProcessingTime fires the processing-time early firings that the
	// wall clock now (the caller's, ms) makes due.
	ProcessingTime(now int64)

	// TrackChanges makes the operator note its changes for Changes.
	TrackChanges()
	// Changes hands fn every entry changed since the last call.
	Changes(fn func(*Entry))
	// Restore takes one entry of a partition's changelog; windows that
	// dropped is past are not restored. The entries come in any order
	// but a sliding window's after its slices; en, its ID and its slices
	// are lent for the call (a restore reuses them for the next entry):
	// the operator copies what it keeps.
	Restore(en *Entry, dropped int64) error
	// FinishRestore ends the restore of the entries given since the last.
	FinishRestore()
	// Due is the lowest watermark at which Advance does more than set
	// the watermark: a window fires or drops, an event-time early firing
	// ticks (math.MaxInt64: none but the end of time). It may be lower
	// than that, never higher. Below it StartAt is Advance, so a caller
	// holding many operators that follow one watermark hands it only to
	// those it makes due, and to the others when it next uses them.
	Due() int64
	// Reserve makes room for keys more keys at once: a restore knows
	// about how many its entries make (state.Restorer.Keys), and a key
	// table grown by doubling moves every key at each step.
	Reserve(keys int)
	// StartAt sets the watermark of an operator that has fired nothing
	// yet (made, restored, not finished) to wm without firing: as Advance
	// before its first Restore would have. Restore does not depend on the
	// watermark, so a restore can be built before the watermark it joins
	// is known.
	StartAt(wm int64)

	// Stats returns what the operator has counted since it was made.
	Stats() Stats

	// CutOver ends the operator's generation at event time t (docs/changing-config.md#generations-and-the-cut-over),
	// t above every event time it has seen: it creates no window that
	// starts at or after t (sessions: takes no record at or after t) and
	// finishes its windows as usual, so that OpenWindows reaches 0 once
	// the last is dropped: the generation retires. Count windows and
	// global windows have no time span: their partial windows fire once,
	// Final, with what they hold, and are dropped at once; then a count
	// operator takes no record, a global one takes none at or after t
	// (those before are late: its window is gone). Records it no longer
	// takes are OtherGeneration. A later CutOver only lowers t. An
	// operator restored for a generation that was cut over gets its
	// CutOver before its first Restore (when it holds nothing to fire):
	// the changes of a cut-over (the count and global windows it fired
	// and dropped) belong in the commit that records the new generation,
	// so a restore sees both or neither.
	CutOver(t int64)

	// check panics if the operator's structures are broken: its key slab
	// (slab.go), its timers, each key's state. Every operator calls it
	// when invariants is on (-race builds) wherever windows fire or drop,
	// after a restore and after a partition is removed.
	check()
}

// Stats is what an operator counts, for the service's metrics; a field
// that does not apply to the operator's windows stays 0.
type Stats struct {
	// Merges counts the records that bridged two sessions or more
	// (session windows).
	Merges int64
}

var (
	_ Operator = (*Engine)(nil)
	_ Operator = (*Sessions)(nil)
	_ Operator = (*Counts)(nil)
)

// New returns the operator for spec's kind of windows.
func New(spec Spec, sink Sink) (Operator, error) {
	switch spec.Kind {
	case KindSession, KindGlobal:
		return NewSessions(spec, sink)
	case KindCount:
		return NewCounts(spec, sink)
	}
	return NewEngine(spec, sink)
}
