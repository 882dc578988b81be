package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
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

		"calendar unknown":            {map[string]string{"window": "{calendar: year}"}, "window.calendar"},
		"calendar on sliding":         {map[string]string{"window": "{type: sliding, size: 2s, slide: 1s, calendar: day}"}, "window.calendar"},
		"calendar on session":         {map[string]string{"window": "{type: session, gap: 1s, calendar: day}"}, "window.calendar"},
		"calendar with size":          {map[string]string{"window": "{calendar: day, size: 24h}"}, "window.size"},
		"calendar with offset":        {map[string]string{"window": "{calendar: day, offset: 1h}"}, "window.offset"},
		"timezone without calendar":   {map[string]string{"window": "{size: 1h, timezone: Europe/Berlin}"}, "window.timezone"},
		"timezone unknown":            {map[string]string{"window": "{calendar: day, timezone: Mars/Olympus}"}, "window.timezone"},
		"timezone Local":              {map[string]string{"window": "{calendar: day, timezone: Local}"}, "window.timezone"},
		"early every negative":        {map[string]string{"window": "{size: 1h, early_firings: {every: -1s}}"}, "window.early_firings.every"},
		"early every below a ms":      {map[string]string{"window": "{size: 1h, early_firings: {every: 1500us}}"}, "window.early_firings.every"},
		"early time unknown":          {map[string]string{"window": "{size: 1h, early_firings: {every: 1m, time: wall}}"}, "window.early_firings.time"},
		"early time empty, every off": {map[string]string{"window": "{size: 1h, early_firings: {time: ''}}"}, "window.early_firings.time"},
		"early unknown key":           {map[string]string{"window": "{size: 1h, early_firings: {evry: 1m}}"}, "window.early_firings.evry"},
		"global without early":        {map[string]string{"window": "{type: global}"}, "window.early_firings.every"},
		"global with size":            {map[string]string{"window": "{type: global, size: 5s, early_firings: {every: 1m}}"}, "window.size"},
		"global with lateness":        {map[string]string{"window": "{type: global, allowed_lateness: 1s, early_firings: {every: 1m}}"}, "window.allowed_lateness"},
		"global with emit":            {map[string]string{"window": "{type: global, emit: on_close, early_firings: {every: 1m}}"}, "window.emit"},
		"global with gap":             {map[string]string{"window": "{type: global, gap: 1s, early_firings: {every: 1m}}"}, "window.gap"},
		"global with slide":           {map[string]string{"window": "{type: global, slide: 1s, early_firings: {every: 1m}}"}, "window.slide"},

		"count without size":         {map[string]string{"window": "{type: count}"}, "window.size"},
		"count size 0":               {map[string]string{"window": "{type: count, size: 0}"}, "window.size"},
		"count size a duration":      {map[string]string{"window": "{type: count, size: 5s}"}, "window.size"},
		"count size negative":        {map[string]string{"window": "{type: count, size: -3}"}, "window.size"},
		"count size fraction":        {map[string]string{"window": "{type: count, size: 2.5}"}, "window.size"},
		"count slide above size":     {map[string]string{"window": "{type: count, size: 3, slide: 4}"}, "window.slide"},
		"count slide 0":              {map[string]string{"window": "{type: count, size: 3, slide: 0}"}, "window.slide"},
		"count slide a duration":     {map[string]string{"window": "{type: count, size: 3, slide: 1s}"}, "window.slide"},
		"count timeout with slide":   {map[string]string{"window": "{type: count, size: 3, slide: 2, timeout: 1s}"}, "window.timeout"},
		"count timeout negative":     {map[string]string{"window": "{type: count, size: 3, timeout: -1s}"}, "window.timeout"},
		"count with lateness":        {map[string]string{"window": "{type: count, size: 3, allowed_lateness: 1s}"}, "window.allowed_lateness"},
		"count with emit":            {map[string]string{"window": "{type: count, size: 3, emit: on_close}"}, "window.emit"},
		"count with offset":          {map[string]string{"window": "{type: count, size: 3, offset: 1s}"}, "window.offset"},
		"count with early firings":   {map[string]string{"window": "{type: count, size: 3, early_firings: {every: 1s}}"}, "window.early_firings.every"},
		"count with calendar":        {map[string]string{"window": "{type: count, size: 3, calendar: day}"}, "window.calendar"},
		"timeout on tumbling":        {map[string]string{"window": "{size: 5s, timeout: 1s}"}, "window.timeout"},
		"sliding slide without unit": {map[string]string{"window": "{type: sliding, size: 5s, slide: 1}"}, "window.slide"},

		"avro results of count windows":  {map[string]string{"window": "{type: count, size: 3}", "source": "{timestamp: {field: t}, schema_registry: {url: 'http://r:8081'}}", "sink": "{format: avro}"}, "sink.format"},
		"avro results of global windows": {map[string]string{"window": "{type: global, early_firings: {every: 1m}}", "source": "{timestamp: {field: t}, schema_registry: {url: 'http://r:8081'}}", "sink": "{format: avro}"}, "sink.format"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			data := doc(tt.sections)
			_, err := Parse(data, nil)
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Key != tt.key || !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), tt.key) {
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
		"calendar day, default zone": {map[string]string{"window": "{calendar: day}"},
			func(c Config) any { return c.Window }, Window{Type: "tumbling", Calendar: "day", Timezone: "UTC", Emit: "on_watermark"}},
		"calendar week in a zone, lateness": {map[string]string{"window": "{calendar: week, timezone: Australia/Lord_Howe, allowed_lateness: 1h, emit: on_close}"},
			func(c Config) any { return c.Window }, Window{Type: "tumbling", Calendar: "week", Timezone: "Australia/Lord_Howe", AllowedLateness: time.Hour, Emit: "on_close"}},
		"calendar empty is tumbling": {map[string]string{"window": "{size: 5s, calendar: ''}"},
			func(c Config) any { return c.Window }, Window{Type: "tumbling", Size: 5 * time.Second, Emit: "on_watermark"}},
		"early firings, default time": {map[string]string{"window": "{size: 1h, early_firings: {every: 1m}}"},
			func(c Config) any { return c.Window.EarlyFirings }, EarlyFirings{Every: time.Minute, Time: "processing"}},
		"early firings in event time on a session": {map[string]string{"window": "{type: session, gap: 1m, early_firings: {every: 10s, time: event}}"},
			func(c Config) any { return c.Window.EarlyFirings }, EarlyFirings{Every: 10 * time.Second, Time: "event"}},
		"early firings off, time kept": {map[string]string{"window": "{size: 1h, early_firings: {every: 0s, time: processing}}"},
			func(c Config) any { return c.Window.EarlyFirings }, EarlyFirings{Time: "processing"}},
		"count": {map[string]string{"window": "{type: count, size: 10}"},
			func(c Config) any { return c.Window }, Window{Type: "count", Size: 10 * time.Millisecond, Emit: "on_watermark"}},
		"count sliding": {map[string]string{"window": "{type: count, size: 10, slide: 3}"},
			func(c Config) any { return c.Window }, Window{Type: "count", Size: 10 * time.Millisecond, Slide: 3 * time.Millisecond, Emit: "on_watermark"}},
		"count with timeout, quoted size": {map[string]string{"window": "{type: count, size: '4', timeout: 30s}"},
			func(c Config) any { return c.Window }, Window{Type: "count", Size: 4 * time.Millisecond, Timeout: 30 * time.Second, Emit: "on_watermark"}},
		"global": {map[string]string{"window": "{type: global, early_firings: {every: 1m, time: event}}"},
			func(c Config) any { return c.Window }, Window{Type: "global", Emit: "on_watermark", EarlyFirings: EarlyFirings{Every: time.Minute, Time: "event"}}},
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
		{"window": "{calendar: day, timezone: Europe/Berlin}"},
		{"window": "{calendar: month, timezone: ''}"},
		{"window": "{type: sliding, size: 1m, slide: 10s, early_firings: {every: 5s, time: event}}"},
		{"window": "{type: global, early_firings: {every: 1m}}"},
		{"window": "{type: count, size: 10, slide: 4}"},
		{"window": "{type: count, size: 3, timeout: 1s}"},
		{"window": "{type: count, size: 5s}"},
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
