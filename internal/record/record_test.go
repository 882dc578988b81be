package record_test

import (
	"testing"

	"aggregator/internal/record"
)

func TestTextRawIsJSON(t *testing.T) {
	tests := map[string]struct{ s, raw string }{
		"plain":        {"sid_1", `"sid_1"`},
		"quote":        {`a"b\c`, `"a\"b\\c"`},
		"control":      {"a\x01\n", `"a\u0001\n"`},
		"unicode":      {"ü😀", `"ü😀"`},
		"invalid UTF8": {"a\xff", "\"a\uFFFD\""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := record.Text(tt.s); got.Raw != tt.raw || got.Str != tt.s || got.IsNum {
				t.Errorf("Text(%q) = %+v, want Raw %s", tt.s, got, tt.raw)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	tests := map[string]struct {
		a, b record.Value
		want int
	}{
		"numbers":                {record.Number(2), record.Number(10), -1},
		"equal numbers":          {record.Number(2), record.Value{Num: 2, IsNum: true, Raw: "2.0"}, 0},
		"number before string":   {record.Number(99), record.Text("1"), -1},
		"string after number":    {record.Text("1"), record.Number(99), 1},
		"strings by code point":  {record.Text("Z"), record.Text("a"), -1},
		"equal strings":          {record.Text("a"), record.Text("a"), 0},
		"longer string is later": {record.Text("ab"), record.Text("a"), 1},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := record.Compare(tt.a, tt.b); got != tt.want {
				t.Errorf("Compare(%s, %s) = %d, want %d", tt.a.Raw, tt.b.Raw, got, tt.want)
			}
		})
	}
}
