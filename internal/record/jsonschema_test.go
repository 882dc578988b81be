package record_test

import (
	"reflect"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/record"
)

// TestDecodeJSONSchema: a json_schema value is its JSON body after the wire
// header, decoded as format json decodes it; the header is checked as for
// Avro, and the schema must be a JSON Schema.
func TestDecodeJSONSchema(t *testing.T) {
	s := record.NewSchemas()
	s.Add(4, record.Schema{Type: record.SchemaJSON, Text: `{"type":"object"}`})
	s.Add(5, record.Schema{Type: record.SchemaAvro, Text: `"string"`})
	s.AddUnknown(6)
	cfg := callsConfig(config.FormatJSONSchema)
	dec, err := record.NewDecoder(cfg.RecordSpec(), s)
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"sid":"sid_1",` + callTime + `,"duration":1}`
	got, err := decode(dec, string(wire(4, []byte(body))), record.Meta{})
	want, jerr := decode(callsDecoder(t, "json"), body, record.Meta{})
	if err != nil || jerr != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Decode(json_schema) = %+v, %v; want (as JSON) %+v, %v", got, err, want, jerr)
	}
	for value, reason := range map[string]string{
		body:                              record.ReasonBadWireFormat,
		string(wire(6, []byte(body))):     record.ReasonUnknownSchema,
		string(wire(5, []byte(body))):     record.ReasonUnknownSchema, // an Avro schema
		string(wire(4, []byte(`{"sid"`))): record.ReasonBadJSON,
	} {
		if _, err := decode(dec, value, record.Meta{}); !isReason(err, reason) {
			t.Errorf("Decode(%q) error = %v, want %s", value, err, reason)
		}
	}
}
