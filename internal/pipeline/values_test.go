package pipeline_test

import (
	"strings"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/repartition"
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
