package windowing_test

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/record"
)

// fuzzFieldsConfig decodes the JSON records of FuzzMissingFields into
// allAggs' values: the numeric aggregates read v, the others x.
func fuzzFieldsConfig() config.Config {
	aggs := []config.Aggregate{{Name: "n", Fn: "count"}, {Name: "s", Fn: "sum", Field: "v"}, {Name: "mn", Fn: "min", Field: "v"},
		{Name: "mx", Fn: "max", Field: "v"}, {Name: "av", Fn: "avg", Field: "v"}, {Name: "f", Fn: "first", Field: "x"},
		{Name: "l", Fn: "last", Field: "x"}, {Name: "cd", Fn: "count_distinct", Field: "x"}, {Name: "p50", Fn: "quantile", Field: "v", Q: 0.5},
		{Name: "p90", Fn: "quantile", Field: "v", Q: 0.9}, {Name: "tk", Fn: "top_k", Field: "x", K: 2}, {Name: "nx", Fn: "count", Field: "x"}}
	return config.Config{
		Source:     config.Source{Format: "json", Key: []string{"k"}, Timestamp: config.Timestamp{Field: "ts", Layout: "unix_ms"}},
		Aggregates: aggs,
	}
}

// fuzzRecord writes the JSON record that two bytes describe: b0's bit 0
// the key, bits 1-2 v (absent, null, a number, text), bits 3-4 x (absent,
// null, a number, text), bits 5-7 the time step (-3 to +4 from the latest
// time); b1 the numbers and texts.
func fuzzRecord(b0, b1 byte, latest int64) (string, int64) {
	ts := latest + int64(b0>>5) - 3
	line := `{"k":"` + string(rune('a'+b0&1)) + `","ts":` + strconv.FormatInt(ts, 10)
	field := func(name string, mode byte, text string) {
		switch mode {
		case 1:
			line += `,"` + name + `":null`
		case 2:
			line += `,"` + name + `":` + strconv.Itoa(int(int8(b1))%13)
		case 3:
			line += `,"` + name + `":"` + text + `"`
		}
	}
	field("v", b0>>1&3, "nan") // text for a sum: a dead letter
	field("x", b0>>3&3, string(rune('p'+b1%4)))
	return line + "}", ts
}

// FuzzMissingFields decodes records with missing, null, numeric and text
// fields and feeds the engine and the reference model (which skips nulls
// as SQL does) the same records and watermarks: only a text v (not a
// number, for a sum) is a dead letter; every other record has the
// reference's outcome (aggregated or late), and the results are the same.
func FuzzMissingFields(f *testing.F) {
	for _, seed := range []string{"\x00\x01\x02\x03", "\x06\x07\x0e\x0f\x16\x17\x1e\x1f", "\xe2\x05\x04\x80\x9a\x33\xff\xff\x1c\x00\x00\x00",
		"\x02\x01\x04\x02\x06\x03\x08\x04\x0a\x05\x0c\x06\x0e\x07\x10\x08\x12\x09"} {
		f.Add([]byte(seed))
	}
	dec, err := record.NewDecoder(fuzzFieldsConfig().RecordSpec(), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, name := range []string{"tumbling lateness offset", "sliding not multiple"} {
			p := propertyCombos[name]
			e, got := newEngine(t, p.spec(allAggs...))
			ref := newReference(p, allAggs)
			latest := int64(0)
			checked := 0
			for i := 0; i+1 < len(data); i += 2 {
				line, ts := fuzzRecord(data[i], data[i+1], latest)
				var rec record.Record
				_, err := dec.Decode(&record.Input{Offset: int64(i / 2), Value: []byte(line)}, &rec)
				if wantDead := data[i]>>1&3 == 3; (err != nil) != wantDead || err != nil && !errors.As(err, new(*record.DecodeError)) {
					t.Fatalf("%s: Decode(%s) = %v, want a dead letter: %v", name, line, err, wantDead)
				}
				if err != nil {
					continue
				}
				at := fmt.Sprintf("%s: record %d %s", name, i/2, line)
				if o, want := e.Add(&rec), ref.Add(&rec); o != want {
					t.Fatalf("%s: Add = %+v, want %+v", at, o, want)
				}
				latest = max(latest, ts)
				e.Advance(latest - 2)
				ref.Advance(latest - 2)
				checked = checkOperator(t, at, e, ref, allAggs, got.got, checked)
			}
			e.Advance(math.MaxInt64)
			ref.Advance(math.MaxInt64)
			checkOperator(t, name+": flush", e, ref, allAggs, got.got, checked)
		}
	})
}
