package demo_test

import (
	"errors"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/demo"
	"aggregator/internal/record"
)

// TestGeneratorAvro: the Avro stream decodes with AvroSchema as the demo's
// pipeline reads it; each class becomes what it should, and malformed
// records are each kind of registry dead letter.
func TestGeneratorAvro(t *testing.T) {
	const id = 1
	cfg := testConfig()
	cfg.AvroSchemaID = id
	schemas := record.NewSchemas()
	schemas.Add(id, record.Schema{Type: record.SchemaAvro, Text: demo.AvroSchema})
	schemas.AddUnknown(demo.UnknownSchemaID)
	dec, err := record.NewDecoder(config.Config{Source: config.Source{Format: config.FormatAvro, Key: []string{"sid"},
		Timestamp: config.Timestamp{Field: "callTime", Layout: "rfc3339"}, Filter: []config.Filter{{Field: "callType", Equals: "success"}}},
		Watermark: config.Watermark{Strategy: "bounded"}, Aggregates: []config.Aggregate{{Name: "d", Fn: "sum", Field: "duration"}}}.RecordSpec(), schemas)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	var rec record.Record
	for _, r := range generate(cfg, 3000) {
		kind, err := dec.Decode(&record.Input{Value: r.Value}, &rec)
		var de *record.DecodeError
		switch {
		case r.Class == demo.Malformed && errors.As(err, &de):
			reasons[de.Reason]++
		case r.Class == demo.Filtered && err == nil && kind == record.Filtered:
		case r.Class != demo.Malformed && r.Class != demo.Filtered && err == nil && kind == record.Event &&
			rec.Time == r.EventTime.UnixMilli() && rec.Key == `{"sid":"`+string(r.Key)+`"}` && rec.Values[0].Num >= 1:
		default:
			t.Fatalf("%v record % x: Decode = %v, %v, %+v", r.Class, r.Value, kind, err, rec)
		}
	}
	for _, reason := range []string{record.ReasonBadWireFormat, record.ReasonUnknownSchema, record.ReasonBadPayload} {
		if reasons[reason] == 0 {
			t.Errorf("malformed records by reason = %v, want some %s", reasons, reason)
		}
	}
}
