package record_test

import (
	"errors"
	"reflect"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/record"
)

// TestDecodeJSONSchema: a json_schema value is its JSON body after the wire
// header, decoded as format json decodes it; the header is checked as for
// Avro, the schema must be a JSON Schema, and the body must match it (with
// the references it names).
func TestDecodeJSONSchema(t *testing.T) {
	s := record.NewSchemas()
	const duration = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"number","minimum":0}`
	s.Add(4, record.Schema{Type: record.SchemaJSON,
		Text:       `{"type":"object","required":["sid"],"properties":{"sid":{"type":"string"},"duration":{"$ref":"duration.json"}}}`,
		References: []record.Reference{{Name: "duration.json", Schema: record.Schema{Type: record.SchemaJSON, Text: duration}}}})
	s.Add(7, record.Schema{Type: record.SchemaJSON, Text: `{"$ref":"elsewhere.json"}`}) // a document the registry did not give
	s.Add(5, record.Schema{Type: record.SchemaAvro, Text: `"string"`})
	s.AddUnknown(6)
	cfg := callsConfig(config.FormatJSONSchema)
	dec, err := record.NewDecoder(cfg.RecordSpec(), s)
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"sid":"sid_1",` + callTime + `,"duration":1}`
	got, err := decode(dec, string(wire(4, []byte(body))), record.Input{})
	want, jerr := decode(callsDecoder(t, "json"), body, record.Input{})
	if err != nil || jerr != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Decode(json_schema) = %+v, %v; want (as JSON) %+v, %v", got, err, want, jerr)
	}
	for value, reason := range map[string]string{
		body:                              record.ReasonBadWireFormat,
		string(wire(6, []byte(body))):     record.ReasonUnknownSchema,
		string(wire(5, []byte(body))):     record.ReasonUnknownSchema, // an Avro schema
		string(wire(4, []byte(`{"sid"`))): record.ReasonBadJSON,
		string(wire(4, []byte(`{"sid":"s",`+callTime+`,"duration":-1}`))): record.ReasonBadPayload, // the reference's minimum
		string(wire(4, []byte(`{"sid":5,`+callTime+`,"duration":1}`))):    record.ReasonBadPayload,
		string(wire(7, []byte(body))):                                     record.ReasonUnknownSchema,
	} {
		if _, err := decode(dec, value, record.Input{}); !isReason(err, reason) {
			t.Errorf("Decode(%q) error = %v, want %s", value, err, reason)
		}
	}
}

// BenchmarkDecodeJSONSchema decodes the same records as json_schema (a
// schema with a required string and a number) and as json.
func BenchmarkDecodeJSONSchema(b *testing.B) {
	s := record.NewSchemas()
	s.Add(1, record.Schema{Type: record.SchemaJSON,
		Text: `{"type":"object","required":["sid","duration"],"properties":{"sid":{"type":"string"},"duration":{"type":"number"}}}`})
	plain, framed := make([][]byte, 64), make([][]byte, 64)
	for i := range plain {
		plain[i] = []byte(`{"sid":"sid_` + itoa(int64(i%7)) + `",` + callTime + `,"duration":` + itoa(int64(i)) + `}`)
		framed[i] = wire(1, plain[i])
	}
	b.Run("json_schema", func(b *testing.B) {
		d, err := record.NewDecoder(callsConfig(config.FormatJSONSchema).RecordSpec(), s)
		if err != nil {
			b.Fatal(err)
		}
		var rec record.Record
		benchLoop(b, framed, func(v []byte) error { _, err := d.Decode(&record.Input{Value: v}, &rec); return err })
	})
	b.Run("json", func(b *testing.B) { benchDecoder(b, callsConfig("json"), plain) })
}

func FuzzDecodeJSONSchema(f *testing.F) {
	s := record.NewSchemas()
	s.Add(1, record.Schema{Type: record.SchemaJSON,
		Text: `{"type":"object","required":["sid"],"properties":{"sid":{"type":"string"},"duration":{"type":"number","minimum":0}}}`})
	dec, err := record.NewDecoder(callsConfig(config.FormatJSONSchema).RecordSpec(), s)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(wire(1, []byte(`{"sid":"sid_1",`+callTime+`,"duration":1}`)))
	f.Add(wire(1, []byte(`{"sid":"\ud83d","duration":-1e400}`)))
	f.Add(wire(1, []byte("{\"sid\":\"a\xffb\"}")))
	f.Add([]byte{0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		var rec record.Record
		if _, err := dec.Decode(&record.Input{Value: data}, &rec); err != nil && !errors.As(err, new(*record.DecodeError)) && !errors.As(err, new(*record.MissingSchemaError)) {
			t.Fatalf("Decode(%q) = %v, want nil, a *record.DecodeError or a *record.MissingSchemaError", data, err)
		}
	})
}
