package record_test

import (
	"math"
	"math/big"
	"regexp"
	"testing"
	"time"

	"aggregator/internal/record"
)

func mustLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestParseTime(t *testing.T) {
	berlin := mustLoc(t, "Europe/Berlin")
	tests := map[string]struct {
		layout string
		loc    *time.Location
		text   string
		want   int64
	}{
		"go layout":                       {"2006-01-02 15:04:05", time.UTC, "2030-12-01 10:10:04", 1922350204000},
		"fraction without layout support": {"2006-01-02 15:04:05", time.UTC, "2030-12-01 10:10:04.456", 1922350204456},
		"one fractional digit":            {"2006-01-02 15:04:05", time.UTC, "2030-12-01 10:10:04.4", 1922350204400},
		"sub-ms digits dropped":           {"2006-01-02 15:04:05", time.UTC, "2030-12-01 10:10:04.9999999999", 1922350204999},
		"comma fraction":                  {"2006-01-02 15:04:05", time.UTC, "2030-12-01 10:10:04,5", 1922350204500},
		"T separator":                     {"2006-01-02T15:04:05", time.UTC, "2030-12-01T10:10:04.001", 1922350204001},
		"time zone":                       {"2006-01-02 15:04:05", berlin, "2030-12-01 10:10:04", 1922350204000 - 3600_000},
		"time zone in summer":             {"2006-01-02 15:04:05", berlin, "2030-07-01 10:10:04.5", 1909131004500 - 2*3600_000},
		"leap day":                        {"2006-01-02", time.UTC, "2028-02-29", 1835395200000},
		"before the epoch":                {"2006-01-02 15:04:05", time.UTC, "1969-12-31 23:59:59.5", -500},
		"year zero":                       {"2006-01-02", time.UTC, "0000-01-01", -62167219200000},
		"european layout":                 {"02.01.2006 15:04", time.UTC, "01.12.2030 10:10", 1922350200000},
		"slow path: month name":           {"Jan _2 2006 15:04:05", time.UTC, "Dec  1 2030 10:10:04.456", 1922350204456},
		"slow path: one-digit hour":       {"2006-01-02 15:04:05", time.UTC, "2030-12-01 1:10:04", 1922317804000},
		"slow path: zone in layout":       {"2006-01-02 15:04:05 -0700", berlin, "2030-12-01 10:10:04 +0200", 1922350204000 - 7200_000},
		"rfc3339 Z":                       {"rfc3339", time.UTC, "2030-12-01T10:10:04Z", 1922350204000},
		"rfc3339 fraction":                {"rfc3339", time.UTC, "2030-12-01T10:10:04.456789Z", 1922350204456},
		"rfc3339 offset":                  {"rfc3339", time.UTC, "2030-12-01T11:40:04.5+01:30", 1922350204500},
		"rfc3339 negative offset":         {"rfc3339", berlin, "2030-12-01T05:10:04-05:00", 1922350204000},
		"unix_s":                          {"unix_s", time.UTC, "1607654003", 1607654003000},
		"unix_s fraction":                 {"unix_s", time.UTC, "1607654003.161", 1607654003161},
		"unix_s long fraction":            {"unix_s", time.UTC, "1607654003.1619", 1607654003161},
		"unix_s exponent":                 {"unix_s", time.UTC, "1.607654003161e9", 1607654003161},
		"unix_s negative fraction":        {"unix_s", time.UTC, "-1.0005", -1001},
		"unix_ms":                         {"unix_ms", time.UTC, "1607654003161", 1607654003161},
		"unix_ms spaces":                  {"unix_ms", time.UTC, " 1607654003161 ", 1607654003161},
		"unix_ms negative zero":           {"unix_ms", time.UTC, "-0", 0},
		"unix_us floors":                  {"unix_us", time.UTC, "1607654003161999", 1607654003161},
		"unix_us negative floors":         {"unix_us", time.UTC, "-1500", -2},
		"unix_ns":                         {"unix_ns", time.UTC, "1607654003161999999", 1607654003161},
		"unix_ns tiny exponent":           {"unix_ns", time.UTC, "5e-99999", 0},
		"unix_ms max":                     {"unix_ms", time.UTC, "9223372036854775807", math.MaxInt64},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := record.ParseTime(tt.layout, tt.loc, []byte(tt.text))
			if err != nil || got != tt.want {
				t.Errorf("ParseTime(%q, %v, %q) = %d, %v, want %d", tt.layout, tt.loc, tt.text, got, err, tt.want)
			}
		})
	}
}

func TestParseTimeErrors(t *testing.T) {
	tests := map[string]struct{ layout, text string }{
		"empty":                   {"2006-01-02 15:04:05", ""},
		"not a date":              {"2006-01-02 15:04:05", "yesterday"},
		"day out of range":        {"2006-01-02 15:04:05", "2030-02-30 10:10:04"},
		"hour out of range":       {"2006-01-02 15:04:05", "2030-12-01 24:10:04"},
		"extra text":              {"2006-01-02 15:04:05", "2030-12-01 10:10:04 UTC"},
		"dot without digits":      {"2006-01-02 15:04:05", "2030-12-01 10:10:04."},
		"rfc3339 without zone":    {"rfc3339", "2030-12-01T10:10:04"},
		"rfc3339 bad offset":      {"rfc3339", "2030-12-01T10:10:04+1:00"},
		"unix not a number":       {"unix_ms", "12a"},
		"unix leading plus":       {"unix_ms", "+12"},
		"unix hex":                {"unix_ms", "0x10"},
		"unix overflow":           {"unix_ms", "9223372036854775808"},
		"unix overflow exponent":  {"unix_s", "1e17"},
		"unix overflow 20 digits": {"unix_ms", "20000000000000000000"},
		"unix empty":              {"unix_s", ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got, err := record.ParseTime(tt.layout, time.UTC, []byte(tt.text)); err == nil {
				t.Errorf("ParseTime(%q, UTC, %q) = %d, nil, want an error", tt.layout, tt.text, got)
			}
		})
	}
}

func TestNewTimeParserRejectsLayoutsWithoutDate(t *testing.T) {
	for _, layout := range []string{"callTime", "15:04:05", "Jan _2 15:04:05", ""} {
		if _, err := record.NewTimeParser(layout, time.UTC); err == nil {
			t.Errorf("NewTimeParser(%q) = nil error, want one", layout)
		}
	}
}

// fuzzLayouts are the layouts FuzzParseTime checks against time.Parse; the
// first ones take the fast path.
var fuzzLayouts = []string{
	"2006-01-02 15:04:05", "2006-01-02T15:04:05", "02.01.2006 15:04", "20060102150405",
	"2006/01/02", time.RFC3339, "Jan _2 2006 15:04:05",
}

func FuzzParseTime(f *testing.F) {
	berlin := mustLoc(f, "Europe/Berlin")
	for _, s := range []string{
		"2030-12-01 10:10:04", "2030-12-01 10:10:04.456", "2030-12-01T10:10:04,5", "2030-12-01  10:10:04",
		"2030-02-29 00:00:00", "0000-01-01 00:00:00.0000000001", "01.12.2030 10:10", "20301201101004.5",
		"2030-12-01T10:10:04Z", "2030-12-01T10:10:04.999+01:00", "2030-12-01T10:10:04-23:59", "Dec  1 2030 10:10:04",
		"2030-03-31 02:30:00", "2030-10-27 02:30:00",
	} {
		for i := range fuzzLayouts {
			f.Add(uint8(i), false, s)
		}
		f.Add(uint8(0), true, s)
	}
	f.Fuzz(func(t *testing.T, which uint8, inBerlin bool, text string) {
		layout, loc := fuzzLayouts[int(which)%len(fuzzLayouts)], time.UTC
		if inBerlin {
			loc = berlin
		}
		name := layout
		if layout == time.RFC3339 {
			name = "rfc3339"
		}
		got, err := record.ParseTime(name, loc, []byte(text))
		want, werr := time.ParseInLocation(layout, text, loc)
		if (err == nil) != (werr == nil) || (err == nil && got != want.UnixMilli()) {
			t.Fatalf("ParseTime(%q, %v, %q) = %d, %v; time.ParseInLocation gives %d, %v", name, loc, text, got, err, want.UnixMilli(), werr)
		}
	})
}

// jsonNumber is the grammar parseUnix accepts, surrounding spaces aside.
var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$`)

func FuzzParseUnix(f *testing.F) {
	for _, s := range []string{"1607654003.161", "-1.0005", "1e3", "-0", "0.0001e4", "9223372036854775807", "1E-3", "12a", "-", "1.", "00"} {
		for i := range 4 {
			f.Add(uint8(i), s)
		}
	}
	layouts := []string{"unix_s", "unix_ms", "unix_us", "unix_ns"}
	f.Fuzz(func(t *testing.T, which uint8, text string) {
		shift := 3 - 3*int(which%4)
		layout := layouts[which%4]
		got, err := record.ParseTime(layout, time.UTC, []byte(text))
		if !jsonNumber.MatchString(text) || len(text) > 400 {
			if err == nil && !jsonNumber.MatchString(trimmed(text)) {
				t.Fatalf("ParseTime(%q, %q) = %d, nil; want an error for a non-number", layout, text, got)
			}
			return
		}
		if m := jsonNumber.FindStringSubmatch(text); len(m[3]) > 5 { // |exponent| ≥ 10^4: too slow for big.Rat
			return
		}
		want, ok := floorScaled(text, shift)
		if ok != (err == nil) || (ok && got != want) {
			t.Fatalf("ParseTime(%q, %q) = %d, %v; want %d (in range: %v)", layout, text, got, err, want, ok)
		}
	})
}

func trimmed(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// floorScaled is the reference for parseUnix: floor(text * 10^shift) with
// exact rational arithmetic, and whether it fits an int64.
func floorScaled(text string, shift int) (int64, bool) {
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return 0, false
	}
	scale := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(shift))), nil))
	if shift >= 0 {
		r.Mul(r, scale)
	} else {
		r.Quo(r, scale)
	}
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for a positive divisor
	return q.Int64(), q.IsInt64()
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// TestParseTimeAcrossZoneTransitions reads wall-clock times every 5
// minutes within 3 hours of each zone transition from 1890 to 2040 (gaps,
// overlaps, odd historical offsets) with one parser, so that its cached
// offset is reused, and compares with time.ParseInLocation.
func TestParseTimeAcrossZoneTransitions(t *testing.T) {
	const layout = "2006-01-02 15:04:05"
	zones := []string{"Europe/Berlin", "America/St_Johns", "Australia/Lord_Howe", "Asia/Kathmandu", "Europe/Amsterdam", "America/Sao_Paulo", "Pacific/Apia"}
	for _, name := range zones {
		t.Run(name, func(t *testing.T) {
			loc := mustLoc(t, name)
			p, err := record.NewTimeParser(layout, loc)
			if err != nil {
				t.Fatal(err)
			}
			end := time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
			transitions := 0
			for at := time.Date(1890, 1, 1, 0, 0, 0, 0, loc); at.Before(end); {
				_, next := at.ZoneBounds()
				if next.IsZero() {
					break
				}
				_, before := at.Zone()
				_, after := next.Zone()
				for _, offset := range []int{before, after} {
					wall := next.Unix() + int64(offset)
					for k := int64(-36); k <= 36; k++ {
						text := time.Unix(wall+k*300+7, 0).UTC().Format(layout)
						want, err := time.ParseInLocation(layout, text, loc)
						got, gerr := p.Parse([]byte(text))
						if err != nil || gerr != nil || got != want.UnixMilli() {
							t.Fatalf("Parse(%q) in %s = %d, %v; time.ParseInLocation gives %d, %v", text, name, got, gerr, want.UnixMilli(), err)
						}
					}
				}
				at = next
				transitions++
			}
			if transitions < 2 {
				t.Fatalf("%s has %d transitions after 1890, want a zone that has some", name, transitions)
			}
		})
	}
}
