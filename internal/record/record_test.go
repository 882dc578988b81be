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
