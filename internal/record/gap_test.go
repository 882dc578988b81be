package record_test

import (
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"aggregator/internal/config"
	"aggregator/internal/record"
)

// gapDecoder decodes {"sid":..,"t":..,"g":..} with window.gap_field g.
func gapDecoder(t testing.TB) *record.Decoder {
	return newDecoder(t, config.Config{
		Source:     config.Source{Key: []string{"sid"}, Timestamp: config.Timestamp{Field: "t", Layout: "unix_ms"}},
		Window:     config.Window{Type: "session", Gap: time.Second, GapField: "g"},
		Aggregates: []config.Aggregate{{Name: "n", Fn: "count"}},
	})
}

// TestDecodeGap: the gap field's values as docs/semantics.md#sessions lists them.
func TestDecodeGap(t *testing.T) {
	tests := map[string]struct {
		g   string // the JSON text of the gap field; "" leaves it out
		gap int64  // 0: the configured gap
		bad bool   // a bad_gap dead letter
	}{
		"missing":             {"", 0, false},
		"null":                {"null", 0, false},
		"number":              {"3000", 3000, false},
		"number with .0":      {"3000.0", 3000, false},
		"number with exp":     {"3e3", 3000, false},
		"numeric string":      {`"3000"`, 3000, false},
		"numeric string .0":   {`"3000.0"`, 3000, false},
		"duration":            {`"1.5s"`, 1500, false},
		"duration in parts":   {`"1m30s"`, 90_000, false},
		"one ms":              {"1", 1, false},
		"zero":                {"0", 0, true},
		"negative":            {"-5", 0, true},
		"negative string":     {`"-5"`, 0, true},
		"negative duration":   {`"-1s"`, 0, true},
		"zero duration":       {`"0s"`, 0, true},
		"fraction of a ms":    {"1.5", 0, true},
		"fraction string":     {`"1.5"`, 0, true},
		"sub-ms duration":     {`"1500us"`, 0, true},
		"empty string":        {`""`, 0, true},
		"other string":        {`"soon"`, 0, true},
		"spaces":              {`" 3000"`, 0, true},
		"true":                {"true", 0, true},
		"object":              {`{"ms":1}`, 0, true},
		"array":               {"[1]", 0, true},
		"beyond int64":        {"1e19", 0, true},
		"largest int64 ms":    {`"9223372036854775807"`, 0, true}, // rounds to 2^63 as a float64
		"a year":              {`"8760h"`, 8760 * 3600 * 1000, false},
		"number, large exact": {"4503599627370496", 4503599627370496, false},
	}
	dec := gapDecoder(t)
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			in := `{"sid":"a","t":5`
			if tt.g != "" {
				in += `,"g":` + tt.g
			}
			in += "}"
			var rec record.Record
			_, err := dec.Decode(&record.Input{Value: []byte(in)}, &rec)
			var de *record.DecodeError
			switch {
			case tt.bad && (!errors.As(err, &de) || de.Reason != record.ReasonBadGap || de.Field != "g"):
				t.Errorf("Decode(%s) = %v, want a bad_gap error on field g", in, err)
			case !tt.bad && err != nil:
				t.Errorf("Decode(%s) = %v, want no error", in, err)
			case !tt.bad && rec.Gap != tt.gap:
				t.Errorf("Decode(%s).Gap = %d, want %d", in, rec.Gap, tt.gap)
			}
		})
	}
}

// FuzzDecodeGap: whatever the gap field holds, Decode gives a positive
// whole gap, 0 (missing/null), or a bad_gap error; a number is its value
// in ms exactly.
func FuzzDecodeGap(f *testing.F) {
	dec := gapDecoder(f)
	for _, s := range []string{"3000", "3000.0", `"3000"`, `"1.5s"`, "null", `""`, "-1", "1.5", `"1h"`, "true", "[]", "1e400", `"9e18ms"`, `"0.5ms"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, g string) {
		in := []byte(`{"sid":"a","t":5,"g":` + g + "}")
		var rec record.Record
		_, err := dec.Decode(&record.Input{Value: in}, &rec)
		var de *record.DecodeError
		if err != nil {
			if !errors.As(err, &de) {
				t.Fatalf("Decode(%q) = %v, want nil or a *record.DecodeError", in, err)
			}
			return
		}
		if rec.Gap < 0 {
			t.Fatalf("Decode(%q).Gap = %d, want >= 0", in, rec.Gap)
		}
		if f, err := strconv.ParseFloat(g, 64); err == nil && rec.Gap != 0 && (f != math.Trunc(f) || float64(rec.Gap) != f) {
			t.Fatalf("Decode(%q).Gap = %d, want the number %v exactly", in, rec.Gap, f)
		}
	})
}
