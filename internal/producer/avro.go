package producer

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"aggregator/internal/config"
	"aggregator/internal/ready"
)

// A ResultEncoder appends a result's value: *Encoder writes JSON,
// *AvroEncoder Avro in the wire format.
type ResultEncoder interface {
	AppendResult(dst []byte, r *ready.WindowResult) []byte
}

// avroAgg is the Avro type of an aggregate's value.
type avroAgg uint8

const (
	avroLong   avroAgg = iota // count, count_distinct
	avroDouble                // sum, min, max, avg, quantile
	avroAny                   // first, last, top_k: a number, string or boolean (objects and arrays, top_k's among them, as their JSON text)
)

func avroAggOf(fn config.AggFn) avroAgg {
	switch fn {
	case config.FnCount, config.FnCountDistinct:
		return avroLong
	case config.FnFirst, config.FnLast, config.FnTopK:
		return avroAny
	}
	return avroDouble
}

// AvroEncoder writes results as Avro records of AvroSchema's schema, in
// Confluent's wire format with the schema's registry id. Not safe for
// concurrent use.
type AvroEncoder struct {
	zone   *time.Location // calendar windows: start and end in this zone; nil: UTC
	header []byte
	keys   int
	aggs   []avroAgg
	text   []byte // scratch for the RFC 3339 times
}

// NewAvroEncoder returns an encoder for cfg's results, whose schema
// (AvroSchema(cfg)) the registry knows as id.
func NewAvroEncoder(cfg config.Config, id uint32) *AvroEncoder {
	e := &AvroEncoder{header: binary.BigEndian.AppendUint32([]byte{0}, id), keys: len(cfg.Source.Key), zone: cfg.Window.Zone()}
	for _, a := range cfg.Aggregates {
		e.aggs = append(e.aggs, avroAggOf(a.Func()))
	}
	return e
}

// AvroName makes name an Avro name: every character outside [A-Za-z0-9_]
// becomes '_', and a leading digit (or an empty name) gets a '_' in front.
func AvroName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) == 0 || b[0] >= '0' && b[0] <= '9' {
		b = append([]byte{'_'}, b...)
	}
	return string(b)
}

// avroNames makes names Avro names, unique among them: a name that
// another one already became gets _2, _3, ... appended.
func avroNames(names []string) []string {
	out := make([]string, len(names))
	seen := map[string]bool{}
	for i, n := range names {
		base := AvroName(n)
		name := base
		for k := 2; seen[name]; k++ {
			name = base + "_" + strconv.Itoa(k)
		}
		seen[name], out[i] = true, name
	}
	return out
}

// avroField is one field of the results schema.
type avroField struct {
	Name    string `json:"name"`
	Doc     string `json:"doc,omitempty"`
	Type    any    `json:"type"`
	Default any    `json:"default,omitempty"`
}

// nullDefault marks a field whose default is null (json omits a nil any).
type nullDefault struct{}

func (nullDefault) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

// AvroSchema is the Avro schema of cfg's results: the fields of a JSON
// result, names made Avro names with the original in each field's doc. An
// aggregate is a union with null and defaults to null, so a config that
// adds one registers a backward- and forward-compatible version.
func AvroSchema(cfg config.Config) string {
	instant := map[string]string{"type": "long", "logicalType": "timestamp-millis"}
	var keyFields []avroField
	for i, n := range avroNames(cfg.Source.Key) {
		keyFields = append(keyFields, avroField{Name: n, Doc: cfg.Source.Key[i], Type: []string{"string", "double", "boolean"}})
	}
	var aggFields []avroField
	for i, n := range avroNames(cfg.AggregateNames()) {
		a := cfg.Aggregates[i]
		typ := map[avroAgg][]string{avroLong: {"null", "long"}, avroDouble: {"null", "double"},
			avroAny: {"null", "double", "string", "boolean"}}[avroAggOf(a.Func())]
		aggFields = append(aggFields, avroField{Name: n, Doc: a.Name + ": " + a.Fn + " " + a.Field, Type: typ, Default: nullDefault{}})
	}
	schema := map[string]any{
		"type": "record", "name": "Result", "namespace": "aggregator",
		"doc": "A window result of " + cfg.Sink.ResultsTopic,
		"fields": []avroField{
			{Name: "key", Doc: "the group key's fields", Type: map[string]any{"type": "record", "name": "Key", "fields": nonNil(keyFields)}},
			{Name: "window_start", Type: instant},
			{Name: "window_end", Type: instant},
			{Name: "start", Doc: "window_start in RFC 3339", Type: "string"},
			{Name: "end", Doc: "window_end in RFC 3339", Type: "string"},
			{Name: "count", Doc: "records in the window", Type: "long"},
			{Name: "aggregates", Type: map[string]any{"type": "record", "name": "Aggregates", "fields": nonNil(aggFields)}},
			{Name: "firing", Doc: "on_time, late or final", Type: "string"},
			{Name: "revision", Type: "long"},
			{Name: "watermark", Type: "long"},
		},
	}
	b, _ := json.Marshal(schema) // maps, strings and slices: cannot fail
	return string(b)
}

func nonNil(fs []avroField) []avroField {
	if fs == nil {
		return []avroField{}
	}
	return fs
}

// appendTime appends ms in RFC 3339, with the calendar's zone offset (as
// the JSON results have it) or in UTC.
func (e *AvroEncoder) appendTime(dst []byte, ms int64) []byte {
	if e.zone != nil {
		e.text = appendZoned(dst, ms, e.zone)
	} else {
		e.text = AppendTime(dst, ms)
	}
	return e.text
}

// AppendResult appends r as an Avro record in the wire format.
func (e *AvroEncoder) AppendResult(dst []byte, r *ready.WindowResult) []byte {
	dst = append(dst, e.header...)
	dst = e.appendKey(dst, r.Key)
	dst = binary.AppendVarint(dst, r.Window.Start)
	dst = binary.AppendVarint(dst, r.Window.End)
	dst = appendAvroString(dst, e.appendTime(e.text[:0], r.Window.Start))
	dst = appendAvroString(dst, e.appendTime(e.text[:0], r.Window.End))
	dst = binary.AppendVarint(dst, r.Count)
	for i, v := range r.Aggregates {
		switch f := v.Num; {
		case v.Null: // an aggregate over no values (docs/semantics.md#aggregates)
			dst = binary.AppendVarint(dst, 0)
		case e.aggs[i] == avroLong:
			dst = binary.AppendVarint(binary.AppendVarint(dst, 1), int64(f))
		case v.IsNum && !math.IsNaN(f) && !math.IsInf(f, 0):
			dst = binary.AppendVarint(dst, 1)
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(f))
		case v.IsNum || e.aggs[i] == avroDouble:
			dst = binary.AppendVarint(dst, 0) // null: not a finite number
		case v.Raw == "true" || v.Raw == "false":
			dst = append(binary.AppendVarint(dst, 3), boolByte(v.Raw == "true"))
		case strings.HasPrefix(v.Raw, `"`):
			dst = appendAvroString(binary.AppendVarint(dst, 2), []byte(v.Str))
		default: // an object or array: its JSON text
			dst = appendAvroString(binary.AppendVarint(dst, 2), []byte(v.Raw))
		}
	}
	dst = appendAvroString(dst, []byte(r.Firing.String()))
	dst = binary.AppendVarint(dst, r.Revision)
	return binary.AppendVarint(dst, r.Watermark)
}

// appendKey writes the key fields of the group key's JSON object, in
// order: a string, a number (as a double) or a boolean.
func (e *AvroEncoder) appendKey(dst []byte, key string) []byte {
	dec := json.NewDecoder(strings.NewReader(key)) // a result, not a record: the allocation is rare enough
	dec.UseNumber()
	_, _ = dec.Token() // {
	for range e.keys {
		_, _ = dec.Token() // the name
		tok, _ := dec.Token()
		switch v := tok.(type) {
		case json.Number:
			f, _ := v.Float64()
			dst = binary.AppendVarint(dst, 1)
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(f))
		case bool:
			dst = append(binary.AppendVarint(dst, 2), boolByte(v))
		case string:
			dst = appendAvroString(binary.AppendVarint(dst, 0), []byte(v))
		default: // the decoder makes keys of strings, numbers and booleans only
			dst = appendAvroString(binary.AppendVarint(dst, 0), nil)
		}
	}
	return dst
}

func appendAvroString(dst, s []byte) []byte {
	return append(binary.AppendVarint(dst, int64(len(s))), s...)
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
