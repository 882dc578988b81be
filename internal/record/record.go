package record

import "strconv"

// Value is one field taken from a record: a number, or else text, or
// null. Raw is the value as it appears in the record (a JSON literal for
// JSON numbers and strings, so it can be written back unchanged).
//
// Null is SQL's NULL: an aggregate's field that is absent from the record
// or whose value is null (a JSON null or absent key, an empty CSV cell, an
// Avro union's null branch, an unset Protobuf field with presence). The
// aggregate skips the record (docs/semantics.md#decoding); a null Value has every other field
// zero. In a result, Null is an aggregate over no values (docs/semantics.md#aggregates).
//
// Which fields Decode sets depends on the use, so that the hot path copies
// no text the engine does not read:
//   - key fields and first/last/count_distinct values: Raw always, Str for
//     strings and booleans (and the text of objects and arrays), Num and
//     IsNum for JSON numbers;
//   - sum/min/max/avg/quantile values: only Num and IsNum (always true);
//     Raw and Str are empty, whether the number was written as a number, a
//     numeric string or a CSV cell;
//   - count: the zero Value; count with a field: the zero Value when the
//     field is present, else the null Value.
//
// Any use may be the null Value, except key fields (a missing key is a dead
// letter).
type Value struct {
	Num   float64
	Str   string // the text of a string value (unquoted); empty for numbers
	Raw   string // the JSON text of the value: 42, 1.5 or "sid_1"
	IsNum bool
	Null  bool // absent or null: every other field is zero
}

// NullValue is the null Value.
var NullValue = Value{Null: true}

// Number returns a numeric Value.
func Number(f float64) Value {
	return Value{Num: f, IsNum: true, Raw: strconv.FormatFloat(f, 'g', -1, 64)}
}

// Text returns a string Value. Raw is s as a JSON string (strconv.Quote
// would write \x escapes, which JSON does not have).
func Text(s string) Value {
	return Value{Str: s, Raw: string(AppendQuoted(nil, []byte(s)))}
}

// Compare orders values as keys sort (docs/semantics.md#more-on-windows-and-firings): numbers numerically before
// strings, strings by code point. It returns -1, 0 or +1.
func Compare(a, b Value) int {
	switch {
	case a.IsNum && b.IsNum:
		switch {
		case a.Num < b.Num:
			return -1
		case a.Num > b.Num:
			return 1
		}
		return 0
	case a.IsNum:
		return -1
	case b.IsNum:
		return 1
	}
	switch {
	case a.Str < b.Str:
		return -1
	case a.Str > b.Str:
		return 1
	}
	return 0
}

// Kind says what a decoded record is.
type Kind uint8

const (
	// Event is a record to aggregate.
	Event Kind = iota
	// Marker is a punctuated watermark marker: Record.Time holds its value.
	Marker
	// Filtered is a record removed by source.filter.
	Filtered
)

// Input is one record as read from Kafka or a replay file: the envelope
// that the decoder reads and that late events and dead letters carry out
// (ready.Input is this type).
type Input struct {
	Topic string
	// Partition is the partition's state id, everywhere: partitions of all
	// input topics numbered one after another, topic after topic in
	// source.topics order (one topic: the Kafka partition). It is the
	// operators' partition and the changelog partition.
	Partition int32
	// KafkaPartition is the partition of Topic the record was read from
	// (the source partition header of a late event or dead letter).
	KafkaPartition int32
	Offset         int64
	Key            []byte // the Kafka record key, for "$key"
	Value          []byte
	Timestamp      int64 // the Kafka record timestamp in ms, for "$timestamp"
	// A record read from the repartition topic is its source record (the
	// fields above, but Partition: the repartition partition) plus its
	// source's dense partition id and its offset in the repartition
	// partition (its position); both are 0 for other records.
	SourceID          int32
	RepartitionOffset int64
	// Sources is the number of source partitions stage 1 knew, and
	// Before and After the source partition's watermark just before and
	// just after the record: stage 2 judges the record as the source saw
	// it, not as of the last marker (0 for other records).
	Sources       int32
	Before, After int64
}

// Record is a decoded input record, reduced to what the engine needs.
type Record struct {
	Partition int32
	Offset    int64
	Time      int64 // event time, ms since the epoch
	// Key identifies the group key: the JSON object of the configured key
	// fields, {"sid":"sid_1"}, or {} for the global key. It is an ordinary
	// (interned) string, still valid after later Decode calls.
	Key       string
	KeyFields []Value // the key's values in configured order, for sorting; Raw/Str point into Key
	// Values holds one Value per configured aggregate, in order (see Value
	// for which of its fields are set for which fn).
	Values []Value
	// Gap is the record's own session gap in ms, from window.gap_field;
	// 0 when there is none (no gap_field, or the field is missing or null).
	Gap int64
}
