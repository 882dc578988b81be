package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestParseWindowKindErrors: the keys of top_k, calendar, early firings,
// global and count windows name themselves when wrong or out of place.
func TestParseWindowKindErrors(t *testing.T) {
	tests := map[string]struct {
		sections map[string]string
		key      string
	}{
		"top_k without k":  {map[string]string{"aggregates": "[{name: n, fn: top_k, field: x}]"}, "aggregates[0].k"},
		"top_k with k 0":   {map[string]string{"aggregates": "[{name: n, fn: top_k, field: x, k: 0}]"}, "aggregates[0].k"},
		"top_k negative k": {map[string]string{"aggregates": "[{name: n, fn: top_k, field: x, k: -1}]"}, "aggregates[0].k"},
		"top_k huge k":     {map[string]string{"aggregates": "[{name: n, fn: top_k, field: x, k: 10001}]"}, "aggregates[0].k"},
		"top_k k fraction": {map[string]string{"aggregates": "[{name: n, fn: top_k, field: x, k: 1.5}]"}, "aggregates[0].k"},
		"top_k no field":   {map[string]string{"aggregates": "[{name: n, fn: top_k, k: 3}]"}, "aggregates[0].field"},
		"k on count":       {map[string]string{"aggregates": "[{name: n, fn: count, k: 3}]"}, "aggregates[0].k"},
		"k on quantile":    {map[string]string{"aggregates": "[{name: n, fn: quantile, field: x, q: 0.5, k: 3}]"}, "aggregates[0].k"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			data := doc(tt.sections)
			_, err := Parse(data, nil)
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Key != tt.key || !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), tt.key+" = ") {
				t.Errorf("Parse(%q) = %v, want a *KeyError for %s wrapping ErrInvalid", data, err, tt.key)
			}
		})
	}
}

func TestParseWindowKindAccepts(t *testing.T) {
	tests := map[string]struct {
		sections map[string]string
		got      func(Config) any
		want     any
	}{
		"top_k": {map[string]string{"aggregates": "[{name: top, fn: top_k, field: x, k: 10}]"},
			func(c Config) any { return c.Aggregates[0] }, Aggregate{Name: "top", Fn: "top_k", Field: "x", K: 10}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			data := doc(tt.sections)
			c, err := Parse(data, nil)
			if err != nil || !reflect.DeepEqual(tt.got(c), tt.want) {
				t.Errorf("Parse(%q) = %#v, %v; want %#v", data, tt.got(c), err, tt.want)
			}
			again, err := Parse(c.YAML(), nil)
			if err != nil || !reflect.DeepEqual(again, c) {
				t.Errorf("Parse(YAML()) = %+v, %v; want %+v\nYAML:\n%s", again, err, c, c.YAML())
			}
		})
	}
}

// FuzzParseWindowKinds is FuzzParse seeded with the window kinds and
// aggregates of this file: whatever the input, Parse returns a config
// that YAML writes and Parse reads back to the same, or an ErrInvalid.
func FuzzParseWindowKinds(f *testing.F) {
	for _, sections := range []map[string]string{
		{"aggregates": "[{name: top, fn: top_k, field: x, k: 10}]"},
		{"aggregates": "[{name: top, fn: top_k, field: x, k: 0}]"},
		{"aggregates": "[{name: top, fn: count, k: 2}]"},
	} {
		f.Add(doc(sections))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, nil)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) = %v, want an error wrapping ErrInvalid", data, err)
			}
			return
		}
		if c.Source.SASL.Password != "" && c.Source.SASL.PasswordFile == "" {
			c.Source.SASL.Password = "<redacted>"
		}
		again, err := Parse(c.YAML(), nil)
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("Parse(YAML()) = %+v, %v; want %+v\nYAML:\n%s", again, err, c, c.YAML())
		}
	})
}
