package config

import (
	"errors"
	"reflect"
	"testing"
)

func FuzzParse(f *testing.F) {
	f.Add(readFile(f, "../../examples/calls.yaml"))
	f.Add(doc(nil))
	f.Add(doc(map[string]string{
		"watermark":  "{strategy: punctuated, marker_field: wm, idle_timeout: 1m, idle_advance: true}",
		"window":     "{type: sliding, size: 1m, slide: 10s, offset: -1500ms, emit: on_close}",
		"aggregates": "[{name: p99, fn: quantile, field: latency, q: 0.99}, {name: c, fn: count}]",
	}))
	f.Add(doc(map[string]string{
		"source": "{group: g, timestamp: {field: t}}",
		"state":  "{commit_interval: 1s, transaction_timeout: 2m}",
	}))
	f.Add(doc(map[string]string{"window": "{sizee: 5s}"}))
	f.Add(doc(map[string]string{"window": "{size: 5s, slide: 1s}"}))
	f.Add(doc(map[string]string{"window": "{size: 1500us}"}))
	f.Add(doc(map[string]string{"source": "{timestamp: {field: &f t}, key: [*f, *f]}"}))
	f.Add(doc(map[string]string{"source": "{group: '123', topics: ['yes', '~', ''], timestamp: {field: 'true'}}"}))
	f.Add([]byte("window: [\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, nil)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) = %v, want an error wrapping ErrInvalid", data, err)
			}
			return
		}
		if c.Source.SASL.Password != "" && c.Source.SASL.PasswordFile == "" {
			c.Source.SASL.Password = "<redacted>" // what YAML writes
		}
		again, err := Parse(c.YAML(), nil)
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("Parse(YAML()) = %+v, %v; want %+v\nYAML:\n%s", again, err, c, c.YAML())
		}
	})
}

func BenchmarkParse(b *testing.B) {
	data := readFile(b, "../../examples/calls.yaml")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkYAML(b *testing.B) {
	c, err := Parse(readFile(b, "../../examples/calls.yaml"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.YAML()
	}
}
