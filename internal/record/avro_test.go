package record_test

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"

	"aggregator/internal/config"
	"aggregator/internal/record"
)

// callSchemaV1 is an Avro call record with nested fields, a union, an enum
// and a timestamp-millis event time; V2 adds a field (a writer that changed
// its schema mid-stream).
const (
	callSchemaV1 = `{"type":"record","name":"Call","namespace":"calls","fields":[
		{"name":"sid","type":"string"},
		{"name":"callType","type":{"type":"enum","name":"CallType","symbols":["failed","success"]}},
		{"name":"callTime","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"tags","type":{"type":"array","items":"string"}},
		{"name":"caller","type":["null",{"type":"record","name":"Caller","fields":[
			{"name":"region","type":"string"},{"name":"attrs","type":{"type":"map","values":"long"}}]}]},
		{"name":"duration","type":["null","long","double"]}]}`
	callSchemaV2 = `{"type":"record","name":"Call","namespace":"calls","fields":[
		{"name":"sid","type":"string"},
		{"name":"callType","type":{"type":"enum","name":"CallType","symbols":["failed","success"]}},
		{"name":"callTime","type":{"type":"long","logicalType":"timestamp-micros"}},
		{"name":"tags","type":{"type":"array","items":"string"}},
		{"name":"caller","type":["null",{"type":"record","name":"Caller","fields":[
			{"name":"region","type":"string"},{"name":"attrs","type":{"type":"map","values":"long"}}]}]},
		{"name":"duration","type":["null","long","double"]},
		{"name":"added","type":"string","default":""}]}`
)

// avroSchemas holds V1 as id 1 and V2 as id 2, and knows that 9 is unknown.
func avroSchemas(t testing.TB) *record.Schemas {
	t.Helper()
	s := record.NewSchemas()
	s.Add(1, record.Schema{Type: record.SchemaAvro, Text: callSchemaV1})
	s.Add(2, record.Schema{Type: record.SchemaAvro, Text: callSchemaV2})
	s.AddUnknown(9)
	return s
}

// wire frames body with the schema id, as Confluent's serializers do.
func wire(id uint32, body []byte) []byte {
	out := binary.BigEndian.AppendUint32([]byte{0}, id)
	return append(out, body...)
}

func avroValue(t testing.TB, id uint32, schema string, v map[string]any) []byte {
	t.Helper()
	body, err := avro.Marshal(avro.MustParse(schema), v)
	if err != nil {
		t.Fatal(err)
	}
	return wire(id, body)
}

// avroConfig keys by sid and caller.region, filters on the enum and takes
// a sum, a last and a first of nested and union fields.
func avroConfig(format string) config.Config {
	return config.Config{
		Source: config.Source{
			Format:    format,
			Key:       []string{"sid", "caller.region"},
			Timestamp: config.Timestamp{Field: "callTime", Layout: "rfc3339", Timezone: "UTC"},
			Filter:    []config.Filter{{Field: "callType", Equals: "success"}},
		},
		Watermark: config.Watermark{Strategy: "bounded"},
		Aggregates: []config.Aggregate{{Name: "total", Fn: "sum", Field: "duration"},
			{Name: "attrs", Fn: "last", Field: "caller.attrs"}, {Name: "tags", Fn: "first", Field: "tags"}},
	}
}

func call(sid string, ms int64, duration any) map[string]any {
	return map[string]any{"sid": sid, "callType": "success", "callTime": ms, "tags": []any{"a", `q"`},
		"caller":   map[string]any{"calls.Caller": map[string]any{"region": "eu", "attrs": map[string]any{"n": int64(1)}}},
		"duration": duration}
}

func TestDecodeAvro(t *testing.T) {
	schemas := avroSchemas(t)
	dec, err := record.NewDecoder(avroConfig(config.FormatAvro).RecordSpec(), schemas)
	if err != nil {
		t.Fatal(err)
	}
	// The same logical record as JSON, times as unix_ms.
	jsonCfg := avroConfig("json")
	jsonCfg.Source.Timestamp.Layout = "unix_ms"
	jdec := newDecoder(t, jsonCfg)
	const asJSON = `{"sid":"s1","callType":"success","callTime":1922350204456,"tags":["a","q\""],` +
		`"caller":{"region":"eu","attrs":{"n":1}},"duration":%s}`
	micros := call("s1", 1922350204456789, map[string]any{"long": int64(3)})
	micros["added"] = "x"
	tests := map[string]struct {
		value []byte
		json  string
	}{
		"long branch":           {avroValue(t, 1, callSchemaV1, call("s1", 1922350204456, map[string]any{"long": int64(3)})), `3`},
		"double branch":         {avroValue(t, 1, callSchemaV1, call("s1", 1922350204456, map[string]any{"double": 2.5})), `2.5`},
		"new schema mid-stream": {avroValue(t, 2, callSchemaV2, micros), `3`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := decode(dec, string(tt.value), record.Input{})
			want, jerr := decode(jdec, strings.Replace(asJSON, "%s", tt.json, 1), record.Input{})
			if err != nil || jerr != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("Decode(avro) = %+v, %v\nwant (as JSON) %+v, %v", got, err, want, jerr)
			}
		})
	}
}

func TestDecodeAvroFilteredAndMissing(t *testing.T) {
	dec, err := record.NewDecoder(avroConfig(config.FormatAvro).RecordSpec(), avroSchemas(t))
	if err != nil {
		t.Fatal(err)
	}
	failed := call("s1", 1, map[string]any{"long": int64(1)})
	failed["callType"] = "failed"
	if got, err := decode(dec, string(avroValue(t, 1, callSchemaV1, failed)), record.Input{}); err != nil || got.Kind != record.Filtered {
		t.Errorf("Decode(callType failed) = %v, %v; want Filtered", got.Kind, err)
	}
	nullDuration := call("s1", 1, nil)
	got, err := decode(dec, string(avroValue(t, 1, callSchemaV1, nullDuration)), record.Input{})
	if err != nil || got.Kind != record.Event || len(got.Values) == 0 || !got.Values[0].Null {
		t.Errorf("Decode(null union) = %+v, %v; want an event whose duration is the null Value", got.Values, err)
	}
	noCaller := call("s1", 1, map[string]any{"long": int64(1)})
	noCaller["caller"] = nil
	_, err = decode(dec, string(avroValue(t, 1, callSchemaV1, noCaller)), record.Input{})
	if de := (*record.DecodeError)(nil); !errors.As(err, &de) || de.Reason != record.ReasonMissingKey || de.Field != "caller.region" {
		t.Errorf("Decode(null caller) error = %v, want %s for caller.region", err, record.ReasonMissingKey)
	}
}

func TestDecodeAvroErrors(t *testing.T) {
	dec, err := record.NewDecoder(avroConfig(config.FormatAvro).RecordSpec(), avroSchemas(t))
	if err != nil {
		t.Fatal(err)
	}
	good := avroValue(t, 1, callSchemaV1, call("s1", 1, map[string]any{"long": int64(1)}))
	tests := map[string]struct {
		value  []byte
		reason string
	}{
		"empty":             {nil, record.ReasonBadWireFormat},
		"short header":      {[]byte{0, 0, 0}, record.ReasonBadWireFormat},
		"not magic byte 0":  {append([]byte{1}, good[1:]...), record.ReasonBadWireFormat},
		"plain JSON":        {[]byte(`{"sid":"s1"}`), record.ReasonBadWireFormat},
		"unknown id":        {wire(9, good[5:]), record.ReasonUnknownSchema},
		"truncated body":    {good[:len(good)-3], record.ReasonBadPayload},
		"trailing bytes":    {append(append([]byte{}, good...), 0), record.ReasonBadPayload},
		"bad union branch":  {wire(1, append(append([]byte{}, good[5:len(good)-2]...), 8, 2)), record.ReasonBadPayload},
		"huge string":       {wire(1, []byte{0xfe, 0xff, 0xff, 0xff, 0x0f}), record.ReasonBadPayload},
		"bad enum":          {wire(1, []byte{2, 'x', 9}), record.ReasonBadPayload},
		"unparsable schema": {wire(3, good[5:]), record.ReasonUnknownSchema},
	}
	s := avroSchemas(t)
	s.Add(3, record.Schema{Type: record.SchemaAvro, Text: `{"type":"record","name":"X","fields":[{"name":"a","type":"Nope"}]}`})
	dec, err = record.NewDecoder(avroConfig(config.FormatAvro).RecordSpec(), s)
	if err != nil {
		t.Fatal(err)
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := decode(dec, string(tt.value), record.Input{})
			if de := (*record.DecodeError)(nil); !errors.As(err, &de) || de.Reason != tt.reason {
				t.Errorf("Decode(%x) error = %v, want %s", tt.value, err, tt.reason)
			}
		})
	}
	var missing *record.MissingSchemaError
	if _, err := decode(dec, string(wire(77, good[5:])), record.Input{}); !errors.As(err, &missing) || missing.ID != 77 {
		t.Errorf("Decode(id never added) error = %v, want a MissingSchemaError for 77", err)
	}
}

// TestDecodeAvroReferences: a named type defined in another subject's
// schema, as the registry returns it in References.
func TestDecodeAvroReferences(t *testing.T) {
	const caller = `{"type":"record","name":"Caller","namespace":"calls","fields":[{"name":"region","type":"string"},{"name":"attrs","type":{"type":"map","values":"long"}}]}`
	const callRef = `{"type":"record","name":"Call","namespace":"calls","fields":[
		{"name":"sid","type":"string"},
		{"name":"callType","type":{"type":"enum","name":"CallType","symbols":["failed","success"]}},
		{"name":"callTime","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"tags","type":{"type":"array","items":"string"}},
		{"name":"caller","type":["null","calls.Caller"]},
		{"name":"duration","type":["null","long","double"]}]}`
	s := record.NewSchemas()
	s.Add(5, record.Schema{Type: record.SchemaAvro, Text: callRef,
		References: []record.Reference{{Name: "calls.Caller", Schema: record.Schema{Type: record.SchemaAvro, Text: caller}}}})
	dec, err := record.NewDecoder(avroConfig(config.FormatAvro).RecordSpec(), s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode(dec, string(avroValue(t, 5, callSchemaV1, call("s1", 7, map[string]any{"long": int64(4)}))), record.Input{})
	if err != nil || got.Key != `{"sid":"s1","caller.region":"eu"}` || got.Time != 7 || got.Values[0].Num != 4 {
		t.Errorf("Decode(with a reference) = %+v, %v", got, err)
	}
}

func FuzzDecodeAvro(f *testing.F) {
	dec, err := record.NewDecoder(avroConfig(config.FormatAvro).RecordSpec(), avroSchemas(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(avroValue(f, 1, callSchemaV1, call("s1", 1922350204456, map[string]any{"long": int64(3)})))
	f.Add(avroValue(f, 1, callSchemaV1, call("", -1, nil)))
	f.Add(wire(2, []byte{2, 'x', 2, 0x80, 1, 0xfd, 0xff, 0xff, 0xff, 0x0f, 0}))
	f.Add(wire(9, nil))
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var rec record.Record
		if _, err := dec.Decode(&record.Input{Value: data}, &rec); err != nil && !errors.As(err, new(*record.DecodeError)) && !errors.As(err, new(*record.MissingSchemaError)) {
			t.Fatalf("Decode(%x) = %v, want nil, a *record.DecodeError or (an id never added) a *record.MissingSchemaError", data, err)
		}
	})
}

// BenchmarkDecodeAvro decodes the same logical record as Avro and as JSON.
func BenchmarkDecodeAvro(b *testing.B) {
	cfg := avroConfig(config.FormatAvro)
	cfg.Aggregates = cfg.Aggregates[:1]
	avroRecs, jsonRecs := make([][]byte, 64), make([][]byte, 64)
	for i := range avroRecs {
		ms := 1922350204456 + int64(i)*37
		avroRecs[i] = avroValue(b, 1, callSchemaV1, call("sid_"+string(rune('a'+i%26)), ms, map[string]any{"long": int64(i)}))
		jsonRecs[i] = []byte(`{"sid":"sid_` + string(rune('a'+i%26)) + `","callType":"success","callTime":` + itoa(ms) +
			`,"tags":["a","q\""],"caller":{"region":"eu","attrs":{"n":1}},"duration":` + itoa(int64(i)) + `}`)
	}
	b.Run("avro", func(b *testing.B) {
		d, err := record.NewDecoder(cfg.RecordSpec(), avroSchemas(b))
		if err != nil {
			b.Fatal(err)
		}
		var rec record.Record
		benchLoop(b, avroRecs, func(v []byte) error { _, err := d.Decode(&record.Input{Value: v}, &rec); return err })
	})
	b.Run("json", func(b *testing.B) {
		jc := avroConfig("json")
		jc.Aggregates, jc.Source.Timestamp.Layout = cfg.Aggregates, "unix_ms"
		benchDecoder(b, jc, jsonRecs)
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
