package record

import (
	"strconv"
	"strings"
)

// Reasons a record is a dead letter; DecodeError.Reason holds one of them.
const (
	ReasonBadJSON          = "bad_json"
	ReasonBadCSV           = "bad_csv"
	ReasonMissingTimestamp = "missing_timestamp"
	ReasonBadTimestamp     = "bad_timestamp"
	ReasonMissingKey       = "missing_key"
	ReasonBadKey           = "bad_key"
	ReasonNonNumeric       = "non_numeric"
	ReasonBadGap           = "bad_gap"
	// Registry formats (avro, protobuf, json_schema).
	ReasonBadWireFormat = "bad_wire_format" // not magic byte 0 and a schema id
	ReasonUnknownSchema = "unknown_schema"  // an id the registry does not know (or a schema that cannot be used)
	ReasonBadPayload    = "bad_payload"     // a body that does not decode with its schema
	// ReasonFutureTimestamp is set by the pipeline's future guard, not by
	// Decode.
	ReasonFutureTimestamp = "future_timestamp"
	// ReasonBadRepartitionRecord is set by the repartition stage's reader
	// for a repartition record whose header it cannot read.
	ReasonBadRepartitionRecord = "bad_repartition_record"
	// ReasonUnfoldUnavailable is set by stage 2 for a record of a group
	// of partials it had to read back from the input topic
	// (docs/design.md#two-phase-aggregation), which no longer holds it.
	ReasonUnfoldUnavailable = "unfold_unavailable"
)

// A DecodeError says why a record value cannot be used. It is data, not a
// failure: the record goes to the dead-letter topic with Error() as reason.
type DecodeError struct {
	Reason string // a short code, one of the Reason constants
	Field  string // the configured field name, when one is to blame
	Detail string // one line, naming the offending value (truncated)
}

// Error returns one line, e.g.
// `non_numeric: field "duration": "abc" is not a number`.
func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString(e.Reason)
	if e.Field != "" {
		b.WriteString(": field ")
		b.WriteString(strconv.Quote(e.Field))
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}
