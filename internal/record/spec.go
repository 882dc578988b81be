package record

import "time"

// Format is how record values are encoded.
type Format uint8

const (
	FormatJSON Format = iota
	FormatCSV
	FormatAvro       // Confluent's wire format, Avro body
	FormatProtobuf   // Confluent's wire format, message indexes, Protobuf body
	FormatJSONSchema // Confluent's wire format, JSON body
)

// Registry reports whether values are in Confluent's wire format, with
// their schemas in a registry (see Schemas).
func (f Format) Registry() bool { return f >= FormatAvro }

// Need is what an aggregate needs of its field.
type Need uint8

const (
	NeedNothing  Need = iota // count: no field
	NeedNumber               // sum, min, max, avg, quantile: a number
	NeedValue                // first, last, count_distinct, top_k: any value
	NeedPresence             // count with a field: only whether it is there and not null
)

// For every Need but NeedNothing, a missing or null field is the null Value
// (record.NullValue), not an error: the aggregate skips the record.

// Spec is what a Decoder needs of the configuration. Config.RecordSpec
// builds it from a validated config (the one place that checks it);
// NewDecoder takes it as given.
type Spec struct {
	Format       Format
	CSVColumns   []string // FormatCSV: the columns' names, in order
	CSVDelimiter string   // FormatCSV: one character
	Key          []string // the group-by fields; none: one global key
	TimeField    string   // the event time's field, or FieldKafkaTimestamp
	// Layout and Location read the event time and markers (NewTimeParser);
	// an instant (an Avro timestamp, a google.protobuf.Timestamp) needs
	// neither.
	Layout      string
	Location    *time.Location // nil: UTC
	MarkerField string         // punctuated watermarks: the marker's field; "" none
	Filters     []Filter
	Aggregates  []Aggregate // in the configured order
	GapField    string      // session windows: the per-record gap's field; "" none
}

// Filter keeps a record only when Field has the text Equals.
type Filter struct{ Field, Equals string }

// Aggregate is what the decoder takes for one aggregate: Field, read as
// Need says.
type Aggregate struct {
	Field string
	Need  Need
}
