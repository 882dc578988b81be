// Package ready is what the pure core (package pipeline) hands the I/O
// shell to write: a Ready holds one step's outputs and, for a commit, the
// changelog records, positions and offsets, in the order they must be
// written. The shell (packages consumer and producer) writes a Ready and
// reports back to the core; the shell knows the core through these types
// only. The package holds data, no behaviour.
package ready

import (
	"aggregator/internal/record"
	"aggregator/internal/watermark"
	"aggregator/internal/windowing"
)

// A Ready is what the shell must make durable, in this order: Outputs,
// then Changelog, then Positions and Watermarks; Offsets are committed last (with
// exactly_once all of it is one transaction). A Ready without Commit set
// holds Outputs only: they belong to the commit that follows. Its Outputs
// are valid until the core's next Ready; the bytes of its changelog
// records and positions until the commit Ready after the core's Accept
// (a writer that keeps them copies them, as the Kafka client does onto
// the wire).
type Ready struct {
	Outputs   []Output
	Commit    bool        // the Ready ends a commit: the shell writes it all, then Accept or Abort
	Changelog []Changelog // window state changed since the last commit
	Positions []Changelog // per partition: input offset and watermark generator, after Changelog
	// Watermarks are, for the watermark topic (by_key with
	// watermark.scope global), the owned partitions whose watermark or
	// idleness changed since they were last published: Source is the
	// partition's dense id, Count the group's partitions in all.
	Watermarks []watermark.Mark
	Offsets    []Offset // input offsets to commit, last
	// Stats are the core's gauges, and its counts since its last Ready,
	// for the metrics (a pipeline.Core's Readies; a single stage's leave
	// them zero). Their slices are valid until the core's next Ready.
	Stats Stats
}

// Stats are what the metrics say of a core as of a Ready.
type Stats struct {
	Watermark      int64 // the watermark the windows follow (the lowest of the partitions' with one operator per partition)
	OpenWindows    int   // open (key, window) pairs
	Generations    int   // live generations of windows over the state partitions (docs/changing-config.md)
	IdlePartitions int   // idle partitions of the window state
	SessionMerges  int64 // records that bridged sessions, since the last Ready
	// GenerationSkips are records a generation aggregated and another's
	// decoding failed on, since the last Ready (docs/changing-config.md#a-record-in-two-generations).
	GenerationSkips int64
	// KeyConflicts are by_key's records on another partition than their
	// group key's first, since the last Ready; Conflict is one to log
	// when LogConflict (at most one a minute).
	KeyConflicts int64
	Conflict     Conflict
	LogConflict  bool
	// Partitions are the assigned partitions' watermarks and lags, by
	// the core's partition id.
	Partitions []PartitionStats
	// Sources is set when the instance follows source partitions it does
	// not own (repartition: stage 2's tables of them; by_key with
	// watermark.scope global: the group's published watermarks): what it
	// knows of each, by source id, which one holds the watermark (-1:
	// none) and how many have not reported.
	HasSources bool
	Sources    []SourceStats
	Holder     int
	Unreported int
}

// PartitionStats are an assigned partition's watermark and lag.
type PartitionStats struct {
	ID        int32 // the core's partition id
	Watermark int64 // its own
	Lag       int64 // records between its position and the high watermark of its last fetch
	LagKnown  bool  // both are known
}

// SourceStats are what an instance knows of one source partition.
type SourceStats struct {
	Watermark int64 // the lowest over the tables that have it
	Reported  bool  // every table (or the watermark topic) has it
	Active    bool  // not idle in one of them at least
}

// A Conflict is a group key seen on two input partitions (state ids) of
// one instance (source.partitioning by_key promises it is in one).
type Conflict struct {
	Key           string
	First, Second int32 // where the key was seen first, and where it was seen again
}

// Empty reports whether the Ready has nothing to write.
func (r *Ready) Empty() bool {
	return len(r.Outputs) == 0 && len(r.Changelog) == 0 && len(r.Positions) == 0 && len(r.Watermarks) == 0 && len(r.Offsets) == 0
}

// Kind is what an output is.
type Kind uint8

const (
	Result      Kind = iota // a window firing, for the results topic
	Late                    // a record too late for all its windows, for the late topic
	DeadLetter              // a record that could not be used, for the dead-letter topic
	Repartition             // an accepted input record, for the repartition topic (stage 1)
	Marker                  // a source partition's watermark, for every repartition partition (stage 1)
)

// An Output is one record for an output topic.
type Output struct {
	Kind   Kind
	Result windowing.Result // Kind Result; its Aggregates live as long as the Ready
	Event  *Event           // Late and DeadLetter
	Repart *Repart          // Repartition and Marker
}

// A Repart is a record for the repartition topic: an input record (In,
// with its source's watermark just before and after it in In.Before and
// In.After, and In.Sources, and as decoded in Record) under its group key
// (Key, the Kafka key of its results too), or a watermark marker (Mark).
type Repart struct {
	In  Input
	Key string
	// Record is the compact form of In's decoded record
	// (record.Decoder.AppendCompact), which stage 2 reads instead of decoding
	// In.Value again. Its bytes are never reused: a writer may keep them.
	Record []byte
	// Filtered: the config's source.filter rejected the record, which
	// stage 1 forwards for the generations of other filters (format 3);
	// Record is its whole decoding then, or nil if it had none.
	Filtered bool
	Mark     watermark.Mark
	// Encoded is the record in the repartition topic's format, as
	// package repartition encodes it (AppendRepart, MarkerRepart): the
	// value of the header named Header if Header is set (a marker, whose
	// record has no value, or a data record of format 1, whose value is
	// In.Value), else the record's value. Its bytes are never reused.
	Header  string
	Encoded []byte
}

// An Event is an input record that goes to the late or the dead-letter
// topic (kept apart from Output: results are most outputs).
type Event struct {
	In Input
	// Late: the record's event time, the watermark it was judged by and
	// the last window it missed.
	EventTime, Watermark int64
	Missed               windowing.Window
	Err                  error // DeadLetter: a *record.DecodeError
}

// The window types a Result output carries, named here so that the shell
// (the producer) knows the core through this package only.
type (
	WindowResult = windowing.Result // a window firing: Output.Result
	Window       = windowing.Window
	Firing       = windowing.Firing
)

// Retract is the firing of a retraction: a tombstone for the results
// topic, under the key of the session a merge superseded.
const Retract = windowing.Retract

// Firings are every Firing, for metrics that count each from the start.
var Firings = windowing.Firings

// Input is one record as read from Kafka or a replay file.
type Input = record.Input

// Changelog is one record for the changelog partition of an input
// partition (its state id). A nil Value is a tombstone; it carries Tag in
// the state.TagHeader header.
type Changelog struct {
	Partition  int32
	Key, Value []byte
	Tag        uint64
}

// Offset is an input partition's position to commit: the offset of the
// next record to process. In a pipeline.Core's Ready it names the
// partition by Topic and Kafka partition; a single stage's (Processor,
// repartition.Stage) leaves Topic empty and Partition is its own id.
type Offset struct {
	Topic     string
	Partition int32
	Offset    int64
}
