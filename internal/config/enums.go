package config

import "slices"

// The YAML enum strings are compared here only: the other packages ask a
// validated config what it says through these methods and constants.

// ExactlyOnce reports whether delivery is exactly_once (else at_least_once).
func (c Config) ExactlyOnce() bool { return c.Delivery == "exactly_once" }

// StartAtLatest reports whether a partition without a committed offset
// starts at its end (source.start_offset: latest), not its start.
func (s Source) StartAtLatest() bool { return s.StartOffset == "latest" }

// ByKey reports whether windows are computed where records are consumed,
// trusting the producer to put every record of a group key in one input
// partition (source.partitioning by_key, or auto with key ["$key"], which
// Kafka's default partitioner keeps in one partition), rather than behind
// the repartition stage (repartition, or auto with fields in source.key).
func (s Source) ByKey() bool {
	return s.Partitioning == "by_key" || s.Partitioning == "auto" && s.KafkaKeyed()
}

// KafkaKeyed reports whether the group key is the Kafka record key
// (source.key ["$key"]), the case where the producer's partitioner
// already keeps a key's records in one partition.
func (s Source) KafkaKeyed() bool { return len(s.Key) == 1 && s.Key[0] == "$key" }

// GlobalScope reports whether windows follow the watermark of the whole
// group (watermark.scope global), not their partition's own.
func (w Watermark) GlobalScope() bool { return w.Scope != "partition" }

// PublishesWatermarks reports whether instances share their partitions'
// watermarks through state.watermark_topic: by_key with scope global. (The
// repartition stage carries them in-band, as markers.)
func (c Config) PublishesWatermarks() bool { return c.Source.ByKey() && c.Watermark.GlobalScope() }

// Punctuated reports whether the watermark comes from marker records.
func (w Watermark) Punctuated() bool { return w.Strategy == "punctuated" }

// WindowKind is window.type.
type WindowKind uint8

const (
	Tumbling WindowKind = iota
	Sliding
	Session
	Global
	Count
)

// Kind is the window's type.
func (w Window) Kind() WindowKind {
	switch w.Type {
	case "sliding":
		return Sliding
	case "session":
		return Session
	case "global":
		return Global
	case "count":
		return Count
	}
	return Tumbling
}

// CalendarUnit is window.calendar.
type CalendarUnit uint8

const (
	NoCalendar CalendarUnit = iota
	CalendarDay
	CalendarWeek
	CalendarMonth
)

// CalendarUnit is the calendar unit of a tumbling window, or NoCalendar.
func (w Window) CalendarUnit() CalendarUnit {
	switch w.Calendar {
	case "day":
		return CalendarDay
	case "week":
		return CalendarWeek
	case "month":
		return CalendarMonth
	}
	return NoCalendar
}

// EventTime reports whether early firings tick in event time (time:
// event), rather than in processing time.
func (e EarlyFirings) EventTime() bool { return e.Time == "event" }

// OnClose reports whether a window fires once, when it closes (window.emit:
// on_close), rather than at the watermark and again when late records come.
func (w Window) OnClose() bool { return w.Emit == "on_close" }

// Compression is sink.compression.
type Compression uint8

const (
	NoCompression Compression = iota
	Gzip
	Snappy
	Lz4
	Zstd
)

// Codec is the output batches' compression.
func (s Sink) Codec() Compression {
	switch s.Compression {
	case "gzip":
		return Gzip
	case "snappy":
		return Snappy
	case "lz4":
		return Lz4
	case "zstd":
		return Zstd
	}
	return NoCompression
}

// AggFn is aggregates[].fn.
type AggFn uint8

const (
	FnCount AggFn = iota
	FnSum
	FnMin
	FnMax
	FnAvg
	FnFirst
	FnLast
	FnCountDistinct
	FnQuantile
	FnTopK
)

// aggFnNames are aggregates[].fn's names, by AggFn: the one list of the
// known aggregate functions.
var aggFnNames = [...]string{
	FnCount: "count", FnSum: "sum", FnMin: "min", FnMax: "max", FnAvg: "avg",
	FnFirst: "first", FnLast: "last", FnCountDistinct: "count_distinct", FnQuantile: "quantile", FnTopK: "top_k",
}

// Func is the aggregate's function; a validated config names a known one
// (an unknown name, which validation rejects, reads as FnCount).
func (a Aggregate) Func() AggFn {
	return AggFn(max(slices.Index(aggFnNames[:], a.Fn), 0))
}
