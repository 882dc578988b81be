package producer_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/hamba/avro/v2"

	"aggregator/internal/config"
	"aggregator/internal/producer"
	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

func avroResultConfig() config.Config {
	return config.Config{
		Source: config.Source{Key: []string{"sid", "$key", "a.b", "a_b", "1st"}},
		Sink:   config.Sink{ResultsTopic: "calls-windows", Format: config.FormatAvro},
		Aggregates: []config.Aggregate{{Name: "total-duration", Fn: "sum", Field: "d"}, {Name: "calls", Fn: "count"},
			{Name: "last", Fn: "last", Field: "p"}, {Name: "first", Fn: "first", Field: "o"}, {Name: "p99", Fn: "quantile", Field: "d", Q: 0.99}},
	}
}

func TestAvroName(t *testing.T) {
	for in, want := range map[string]string{"sid": "sid", "$key": "_key", "a.b": "a_b", "1st": "_1st", "": "_", "ü": "__"} {
		if got := producer.AvroName(in); got != want {
			t.Errorf("AvroName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAvroResult: a result written with AvroSchema decodes, with that
// schema, to the fields of the JSON result; names are Avro names (unique)
// with the originals in their doc.
func TestAvroResult(t *testing.T) {
	cfg := avroResultConfig()
	schema, err := avro.Parse(producer.AvroSchema(cfg))
	if err != nil {
		t.Fatalf("AvroSchema does not parse: %v\n%s", err, producer.AvroSchema(cfg))
	}
	rs := schema.(*avro.RecordSchema)
	var keyNames, keyDocs []string
	for _, f := range rs.Fields()[0].Type().(*avro.RecordSchema).Fields() {
		keyNames, keyDocs = append(keyNames, f.Name()), append(keyDocs, f.Doc())
	}
	if want := []string{"sid", "_key", "a_b", "a_b_2", "_1st"}; !reflect.DeepEqual(keyNames, want) || !reflect.DeepEqual(keyDocs, cfg.Source.Key) {
		t.Errorf("key fields %q (docs %q), want %q (docs %q)", keyNames, keyDocs, want, cfg.Source.Key)
	}
	r := &windowing.Result{Key: `{"sid":"s\"1","$key":"k","a.b":4.5,"a_b":true,"1st":-2}`, Window: windowing.Window{Start: 1922350200000, End: 1922350205000},
		Count: 4, Aggregates: []record.Value{record.Number(4), record.Number(4), record.Text("x"), {Raw: `{"o":[1]}`, Str: `{"o":[1]}`}, record.Number(7.5)},
		Firing: windowing.Late, Revision: 2, Watermark: 1922350206999}
	const id = 42
	v := producer.NewAvroEncoder(cfg, id).AppendResult(nil, r)
	if v[0] != 0 || binary.BigEndian.Uint32(v[1:5]) != id {
		t.Fatalf("header % x, want magic byte 0 and id %d", v[:5], id)
	}
	var got map[string]any
	if err := avro.Unmarshal(schema, v[5:], &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"key":          map[string]any{"sid": "s\"1", "_key": "k", "a_b": 4.5, "a_b_2": true, "_1st": -2.0},
		"window_start": time.UnixMilli(1922350200000).UTC(), "window_end": time.UnixMilli(1922350205000).UTC(),
		"start": "2030-12-01T10:10:00Z", "end": "2030-12-01T10:10:05Z", "count": int64(4),
		"aggregates": map[string]any{"total_duration": 4.0, "calls": int64(4), "last": "x", "first": `{"o":[1]}`, "p99": 7.5},
		"firing":     "late", "revision": int64(2), "watermark": int64(1922350206999),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded result =\n%v\nwant\n%v", got, want)
	}
}

// TestAvroSchemaEvolves: a config that adds an aggregate derives a schema
// that reads the old results and that old readers can read.
func TestAvroSchemaEvolves(t *testing.T) {
	old := avroResultConfig()
	added := avroResultConfig()
	added.Aggregates = append(added.Aggregates, config.Aggregate{Name: "max d", Fn: "max", Field: "d"})
	oldSchema, newSchema := avro.MustParse(producer.AvroSchema(old)), avro.MustParse(producer.AvroSchema(added))
	compat := avro.NewSchemaCompatibility()
	if err := compat.Compatible(newSchema, oldSchema); err != nil {
		t.Errorf("the new schema cannot read old results (not backward compatible): %v", err)
	}
	if err := compat.Compatible(oldSchema, newSchema); err != nil {
		t.Errorf("the old schema cannot read new results (not forward compatible): %v", err)
	}
}

// TestAvroCalendarTopK: a calendar day's start and end carry the zone's
// offset, as in the JSON results, and a top_k value is its JSON text.
func TestAvroCalendarTopK(t *testing.T) {
	cfg := config.Config{
		Source:     config.Source{Key: []string{"sid"}},
		Sink:       config.Sink{ResultsTopic: "calls-windows", Format: config.FormatAvro},
		Window:     config.Window{Type: "tumbling", Calendar: "day", Timezone: "Europe/Berlin"},
		Aggregates: []config.Aggregate{{Name: "top", Fn: "top_k", Field: "c", K: 2}},
	}
	schema, err := avro.Parse(producer.AvroSchema(cfg))
	if err != nil {
		t.Fatal(err)
	}
	// 2030-03-31 in Berlin: 23 hours, from +01:00 to +02:00.
	start, end := time.Date(2030, 3, 30, 23, 0, 0, 0, time.UTC).UnixMilli(), time.Date(2030, 3, 31, 22, 0, 0, 0, time.UTC).UnixMilli()
	top := `[{"value":"a","count":3},{"value":1,"count":1}]`
	r := &windowing.Result{Key: `{"sid":"s1"}`, Window: windowing.Window{Start: start, End: end}, Count: 4,
		Aggregates: []record.Value{{Raw: top}}, Firing: windowing.OnTime, Watermark: end - 1}
	var got map[string]any
	if err := avro.Unmarshal(schema, producer.NewAvroEncoder(cfg, 1).AppendResult(nil, r)[5:], &got); err != nil {
		t.Fatal(err)
	}
	if got["start"] != "2030-03-31T00:00:00+01:00" || got["end"] != "2030-04-01T00:00:00+02:00" {
		t.Errorf("start, end = %v, %v; want 2030-03-31T00:00:00+01:00, 2030-04-01T00:00:00+02:00", got["start"], got["end"])
	}
	if aggs := got["aggregates"].(map[string]any); aggs["top"] != top {
		t.Errorf("top = %v, want %s", aggs["top"], top)
	}
}

// TestAvroNoValues: aggregates over no values (docs/semantics.md#aggregates) are the null
// branch of their union, count(field) and count_distinct 0, top_k [];
// the derived schema, which makes every aggregate nullable, is the golden.
func TestAvroNoValues(t *testing.T) {
	cfg := config.Config{
		Source: config.Source{Key: []string{"k"}},
		Sink:   config.Sink{ResultsTopic: "r", Format: config.FormatAvro},
		Aggregates: []config.Aggregate{{Name: "n", Fn: "count"}, {Name: "nv", Fn: "count", Field: "v"}, {Name: "s", Fn: "sum", Field: "v"},
			{Name: "mn", Fn: "min", Field: "v"}, {Name: "av", Fn: "avg", Field: "v"}, {Name: "f", Fn: "first", Field: "v"},
			{Name: "cd", Fn: "count_distinct", Field: "v"}, {Name: "p", Fn: "quantile", Field: "v", Q: 0.5}, {Name: "tk", Fn: "top_k", Field: "v", K: 2}},
	}
	text := producer.AvroSchema(cfg)
	checkSchemaGolden(t, "testdata/no_values.avsc", text)
	schema := avro.MustParse(text)
	null := record.NullValue
	r := &windowing.Result{Key: `{"k":"a"}`, Window: windowing.Window{Start: 0, End: 10}, Count: 2,
		Aggregates: []record.Value{record.Number(2), record.Number(0), null, null, null, null, record.Number(0), null, {Raw: "[]"}}}
	var got map[string]any
	if err := avro.Unmarshal(schema, producer.NewAvroEncoder(cfg, 1).AppendResult(nil, r)[5:], &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"n": int64(2), "nv": int64(0), "s": nil, "mn": nil, "av": nil, "f": nil, "cd": int64(0), "p": nil, "tk": "[]"}
	if aggs := got["aggregates"]; !reflect.DeepEqual(aggs, want) {
		t.Errorf("aggregates = %v, want %v", aggs, want)
	}
}

var updateSchemas = flag.Bool("update", false, "rewrite testdata/*.avsc")

// checkSchemaGolden compares an Avro schema with the file at path
// (indented), or rewrites the file under -update.
func checkSchemaGolden(t *testing.T, path, schema string) {
	t.Helper()
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(schema), "", "  "); err != nil {
		t.Fatal(err)
	}
	b.WriteByte('\n')
	if *updateSchemas {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("AvroSchema =\n%s\nwant (%s)\n%s", b.Bytes(), path, want)
	}
}
