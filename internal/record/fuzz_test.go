package record_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"aggregator/internal/config"
	"aggregator/internal/record"
)

// fuzzJSONConfig reads a top-level and a nested key, and values of both
// kinds, with no filter so that most inputs get to the key.
func fuzzJSONConfig() config.Config {
	return with(callsConfig("json"), func(c *config.Config) {
		c.Source.Key = []string{"sid", "a.b"}
		c.Source.Timestamp.Layout = "unix_ms"
		c.Source.Filter = nil
		c.Aggregates = []config.Aggregate{{Name: "d", Fn: "sum", Field: "duration"}, {Name: "p", Fn: "last", Field: "a.c"}}
	})
}

func FuzzDecodeJSON(f *testing.F) {
	dec := newDecoder(f, fuzzJSONConfig())
	for _, s := range []string{
		`{"sid":"s","a":{"b":1,"c":"x"},"callTime":1922350204456,"duration":1}`,
		`{"sid":"s\u0069\ud83d\ude00","a":{"b":true,"c":{"x":[1,2]}},"callTime":"1922350204456","duration":"2.5"}`,
		`{"a":{"b":null}}`, `{"sid":{"a":1}}`, `[1,2]`, `{"sid":"\ud83d"}`, `{"x":[[[]]],"sid":1e5,"a":{"b":-0.5e-3},"callTime":1,"duration":-0}`,
		`{"sid":"a","sid":"b"}`, `{"sid":"a\xffb","a":{"b":"\u0000"},"callTime":5,"duration":1}`, ` {"sid" : "s" } `, `{"sid":"s"`, `{"sid":01}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var rec record.Record
		kind, err := dec.Decode(&record.Input{Value: data}, &rec)
		var de *record.DecodeError
		if err != nil && !errors.As(err, &de) {
			t.Fatalf("Decode(%q) = %v, want nil or a *record.DecodeError", data, err)
		}
		if strings.ContainsAny(errorText(err), "\n\r") {
			t.Fatalf("Decode(%q) error %q has a line break", data, err)
		}
		var m map[string]any
		valid := json.Valid(data) && bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("{")) && unmarshalNumbers(data, &m) == nil
		badJSON := de != nil && de.Reason == record.ReasonBadJSON
		tooDeep := badJSON && strings.Contains(de.Detail, "nested too deeply")
		if badJSON == valid && !tooDeep {
			t.Fatalf("Decode(%q) = %v, but encoding/json says valid object = %v", data, err, valid)
		}
		if err == nil && kind == record.Event {
			checkKeyAgainstJSON(t, data, m, &rec)
		}
	})
}

// checkKeyAgainstJSON checks rec.Key and rec.Values against what
// encoding/json finds in the record.
func checkKeyAgainstJSON(t *testing.T, data []byte, m map[string]any, rec *record.Record) {
	var key map[string]any
	if err := unmarshalNumbers([]byte(rec.Key), &key); err != nil {
		t.Fatalf("Decode(%q).Key = %s, not JSON: %v", data, rec.Key, err)
	}
	want := map[string]any{"sid": m["sid"], "a.b": lookup(m, "a", "b")}
	if !reflect.DeepEqual(key, want) {
		t.Fatalf("Decode(%q).Key = %s, encoding/json finds %v", data, rec.Key, want)
	}
	values := rec.KeyFields
	if c := lookup(m, "a", "c"); c != nil {
		values = append(values, rec.Values[1])
	}
	for i, v := range values {
		if !json.Valid([]byte(v.Raw)) || !utf8.ValidString(v.Str) || v.Null {
			t.Fatalf("Decode(%q): value %d = %+v: Raw is not JSON or Str is not UTF-8", data, i, v)
		}
	}
	// A missing or null field is the null Value, for the sum and the last.
	for i, field := range []any{m["duration"], lookup(m, "a", "c")} {
		if v := rec.Values[i]; (field == nil) != v.Null || v.Null && v != record.NullValue {
			t.Fatalf("Decode(%q): value %d = %+v, encoding/json finds %v", data, i, v, field)
		}
	}
	if m["duration"] != nil {
		checkSumAgainstJSON(t, data, m["duration"], rec.Values[0])
	}
}

// checkSumAgainstJSON checks the value of a numeric aggregate against
// strconv.ParseFloat of what encoding/json finds (a number, or a string
// holding one).
func checkSumAgainstJSON(t *testing.T, data []byte, field any, got record.Value) {
	var text string
	switch v := field.(type) {
	case json.Number:
		text = string(v)
	case string:
		text = strings.Trim(v, " \t")
	default:
		t.Fatalf("Decode(%q) accepted %v (%T) for a sum", data, field, field)
	}
	want, err := strconv.ParseFloat(text, 64)
	if err != nil || !got.IsNum || math.Float64bits(got.Num) != math.Float64bits(want) || got.Raw != "" || got.Str != "" {
		t.Fatalf("Decode(%q) sum = %+v; strconv.ParseFloat(%q) = %v, %v", data, got, text, want, err)
	}
}

func lookup(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = obj[p]
	}
	return v
}

func unmarshalNumbers(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return d.Decode(v)
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func FuzzDecodeCSV(f *testing.F) {
	dec := callsDecoder(f, "csv")
	for _, s := range []string{
		"sid_1,success,2030-12-01 10:10:04.456,1", `"s,""1""",success,"2030-12-01 10:10:04",2`, `s,success,2030-12-01 10:10:04,`,
		`,success,2030-12-01 10:10:04,1`, `"",success,2030-12-01 10:10:04,1`, `s"x,a,b,c`, `"s"x,a,b,c`, `"s,a,b,c`, "a,b,c", "a,b,c,d,e", "",
		"s,success,2030-12-01 10:10:04,1\r\n", "\"a\nb\",success,2030-12-01 10:10:04,1",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var rec record.Record
		kind, err := dec.Decode(&record.Input{Value: line}, &rec)
		var de *record.DecodeError
		if err != nil && !errors.As(err, &de) {
			t.Fatalf("Decode(%q) = %v, want nil or a *record.DecodeError", line, err)
		}
		if bytes.ContainsAny(line, "\r\n") || len(line) == 0 {
			return // encoding/csv reads line breaks differently
		}
		cells, csvErr := csv.NewReader(bytes.NewReader(line)).Read()
		badCSV := de != nil && de.Reason == record.ReasonBadCSV
		if badCSV != (csvErr != nil || len(cells) != 4) {
			t.Fatalf("Decode(%q) = %v; encoding/csv reads %q, %v", line, err, cells, csvErr)
		}
		if err == nil && kind == record.Event && utf8.ValidString(cells[0]) && rec.KeyFields[0].Str != cells[0] {
			t.Fatalf("Decode(%q) key %q, encoding/csv reads %q", line, rec.KeyFields[0].Str, cells[0])
		}
	})
}
