package pipeline_test

import (
	"strings"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/repartition"
	"aggregator/internal/state"
)

// TestInputValue: the value a record's decoding may read with a registry
// format's schemas is the record's own for an input partition, a
// format-1 repartition record and by_key; the input value carried by a
// format 2 or 3 repartition record (with a form or none: stage 2 decodes
// it when the form is of another config, missing, or under another
// generation); nothing for a marker or a record that does not parse.
func TestInputValue(t *testing.T) {
	const value = "\x00\x00\x00\x00\x07avro body"
	in := ready.Input{Topic: "calls", Partition: 1, KafkaPartition: 1, Offset: 9, Key: []byte("k"), Value: []byte(value)}
	form := []byte("a form")
	tests := map[string]struct {
		partitioning string
		topic        string
		value        []byte
		headers      bool
		want         string
	}{
		"input partition, repartition":       {"repartition", "calls", []byte(value), false, value},
		"input partition, by_key":            {"by_key", "calls", []byte(value), false, value},
		"format 1: the value is the input's": {"repartition", "g-repartition", []byte(value), true, value},
		"format 2":                           {"repartition", "g-repartition", repartition.AppendValue(nil, &in, form), false, value},
		"format 3 with a form":               {"repartition", "g-repartition", repartition.AppendValue3(nil, &in, form, true), false, value},
		"format 3 without a form":            {"repartition", "g-repartition", repartition.AppendValue3(nil, &in, nil, false), false, value},
		"a marker (no value)":                {"repartition", "g-repartition", nil, true, ""}, // its header holds it all,
		"a record that does not parse":       {"repartition", "g-repartition", []byte("\x03dx"), false, ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(strings.Replace(coreYaml, "%s", tt.partitioning, 1)), nil)
			if err != nil {
				t.Fatal(err)
			}
			cfg.State.RepartitionTopic = "g-repartition"
			c, err := pipeline.NewCore(pipeline.Spec{Config: cfg, Partitions: []int32{2, 2}})
			if err != nil {
				t.Fatal(err)
			}
			id := c.Layout().ID(tt.topic, 1)
			if got := c.InputValue(id, tt.value, tt.headers); string(got) != tt.want {
				t.Errorf("InputValue(%s partition 1, %q, headers %v) = %q, want %q", tt.topic, tt.value, tt.headers, got, tt.want)
			}
		})
	}
}

// TestNewCoreRegistryFormats: a core of a registry format is made on
// every partitioning, with the shell's Schemas or (a config being
// checked) none: both stages' decoders need them.
func TestNewCoreRegistryFormats(t *testing.T) {
	for _, format := range []string{config.FormatAvro, config.FormatProtobuf, config.FormatJSONSchema} {
		for _, partitioning := range []string{"auto", "by_key", "repartition"} {
			t.Run(format+"/"+partitioning, func(t *testing.T) {
				yaml := strings.Replace(coreYaml, "%s", partitioning+", format: "+format+", schema_registry: {url: 'http://registry:8081'}", 1)
				cfg, err := config.Parse([]byte(yaml), nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, schemas := range []*record.Schemas{nil, record.NewSchemas()} {
					if _, err := pipeline.NewCore(pipeline.Spec{Config: cfg, Partitions: []int32{2, 2}, Schemas: schemas}); err != nil {
						t.Errorf("NewCore(%s, %s, Schemas %v) = %v, want nil", format, partitioning, schemas != nil, err)
					}
				}
			})
		}
	}
}

// BenchmarkInputValue is what the fetcher's look for schema ids adds per
// repartition record with a registry format (InputValue), beside
// BenchmarkDecodeRepartitionRecord, the decoding of the same record.
func BenchmarkInputValue(b *testing.B) {
	c, id, value := benchRepartitionRecord(b)
	b.ReportAllocs()
	for b.Loop() {
		if c.InputValue(id, value, false) == nil {
			b.Fatal("no input value")
		}
	}
}

// BenchmarkDecodeRepartitionRecord decodes a format-3 record of a
// repartition partition from its compact form (Core.Decode).
func BenchmarkDecodeRepartitionRecord(b *testing.B) {
	c, id, value := benchRepartitionRecord(b)
	dec, err := record.NewDecoder(benchConfig(b).RecordSpec(), nil)
	if err != nil {
		b.Fatal(err)
	}
	var d pipeline.Decoded
	b.ReportAllocs()
	for b.Loop() {
		d.In = ready.Input{Topic: "g-repartition", Partition: id, KafkaPartition: id, Offset: 7, Key: []byte(`{"k":"a"}`), Value: value}
		c.Decode(dec, &d, false, nil)
		if d.Err != nil {
			b.Fatal(d.Err)
		}
	}
}

func benchConfig(b *testing.B) config.Config {
	cfg, err := config.Parse([]byte(strings.Replace(coreYaml, "%s", "repartition", 1)), nil)
	if err != nil {
		b.Fatal(err)
	}
	cfg.State.RepartitionTopic = "g-repartition"
	// Format 3: a record a record. Format 4 (the default) folds them into
	// a group that Step does not hand over, which these benchmarks do
	// not measure (they failed with "stage 1 forwarded no record" once it
	// became the default).
	cfg.State.RepartitionFormat = 3
	return cfg
}

// benchRepartitionRecord is a core of two stages and the value of a
// repartition record its stage 1 made (format 3, with a compact form),
// with the id of the repartition partition it is in.
func benchRepartitionRecord(b *testing.B) (*pipeline.Core, int32, []byte) {
	cfg := benchConfig(b)
	c, err := pipeline.NewCore(pipeline.Spec{Config: cfg, Partitions: []int32{1, 1}})
	if err != nil {
		b.Fatal(err)
	}
	dec, err := record.NewDecoder(cfg.RecordSpec(), nil)
	if err != nil {
		b.Fatal(err)
	}
	in, _ := c.Assign("calls", 0, 0)
	rep, _ := c.Assign("g-repartition", 0, 0)
	if _, err := c.Restore(rep, state.NewRestorer(), 0); err != nil {
		b.Fatal(err)
	}
	d := []pipeline.Decoded{{In: ready.Input{Topic: "calls", Partition: in, Offset: 0, Value: []byte(`{"k":"a","t":1000,"v":"some value of an input record"}`)}}}
	c.Decode(dec, &d[0], false, nil)
	var counts pipeline.Counts
	c.Apply(in, d, 1, 0, &counts)
	for _, o := range c.Step(0).Outputs {
		if o.Kind == ready.Repartition {
			return c, rep, o.Repart.Encoded
		}
	}
	b.Fatal("stage 1 forwarded no record")
	return nil, 0, nil
}
