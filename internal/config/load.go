package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Load reads the YAML file at path and returns Parse's result for it.
func Load(path string, getenv func(string) string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return Parse(data, getenv)
}

// Parse decodes a YAML config strictly, applies the AGGREGATOR_* overrides
// that getenv (nil for none) returns, fills in defaults (those derived from
// other keys, such as state.changelog_topic, after the overrides), validates
// everything but the Kafka keys (see ValidateKafka) and reads
// source.sasl.password_file into source.sasl.password.
func Parse(data []byte, getenv func(string) string) (Config, error) {
	c := defaults()
	src := newSources()
	err := src.decodeYAML(data, &c)
	if err == nil && getenv != nil {
		err = src.applyEnv(&c, getenv)
	}
	var ke *KeyError
	switch {
	case err == nil:
		c.deriveDefaults()
		if c.Source.SASL.Mechanism == MechanismAWSMSKIAM && c.Source.SASL.AWS.Region == "" && getenv != nil {
			c.Source.SASL.AWS.Region = getenv("AWS_REGION") // the AWS SDK's own default
		}
		err = c.validate(src)
	case errors.As(err, &ke):
		err = collect(append(src.more, ke)) // the unknown keys found before it too
	}
	if err == nil {
		err = c.readPasswordFile()
	}
	if err != nil {
		return Config{}, src.annotate(err)
	}
	return c, nil
}

// defaults is the config before the file and the environment apply.
func defaults() Config {
	return Config{
		Source: Source{
			Brokers:      []string{},
			Topics:       []string{},
			StartOffset:  "earliest",
			Format:       "json",
			Partitioning: "auto",
			CSV:          CSV{Columns: []string{}, Delimiter: ","},
			Key:          []string{},
			Timestamp:    Timestamp{Layout: "rfc3339", Timezone: "UTC"},
			Filter:       []Filter{},
			// Kafka's default (group.consumer.session.timeout.ms, KIP-735).
			SessionTimeout: 45 * time.Second,
		},
		Watermark:  Watermark{Strategy: "bounded", Scope: "global"},
		Window:     Window{Type: "tumbling", Emit: "on_watermark"},
		Aggregates: []Aggregate{},
		Sink: Sink{
			Format:            "json",
			Compression:       "lz4",
			Linger:            5 * time.Millisecond,
			CreateTopics:      true,
			Partitions:        1,
			ReplicationFactor: -1,
		},
		Delivery:        "exactly_once",
		HTTP:            HTTP{Listen: ":9090"},
		Log:             Log{Level: "info", Format: "json"},
		ShutdownTimeout: 25 * time.Second,
		State:           State{CommitInterval: 100 * time.Millisecond, TransactionTimeout: 10 * time.Second},
	}
}

// changelogSuffix makes the default state.changelog_topic from
// source.group, as Kafka Streams names its changelogs after the application.
const changelogSuffix = "-changelog"

// repartitionSuffix names the default repartition topic, as Kafka Streams
// names its repartition topics after the application; watermarkSuffix the
// default watermark topic.
const (
	repartitionSuffix = "-repartition"
	watermarkSuffix   = "-watermarks"
)

// deriveDefaults fills in the defaults that depend on other keys, once the
// file and the environment have set those: state.changelog_topic, when
// unset, is source.group + "-changelog" (and stays empty without a group,
// which ValidateKafka reports).
func (c *Config) deriveDefaults() {
	if c.State.ChangelogTopic == "" && c.Source.Group != "" {
		c.State.ChangelogTopic = c.Source.Group + changelogSuffix
	}
	if c.State.RepartitionFormat == 0 && !c.Source.ByKey() {
		c.State.RepartitionFormat = 3
	}
	if c.State.RepartitionTopic == "" && c.Source.Group != "" && !c.Source.ByKey() {
		c.State.RepartitionTopic = c.Source.Group + repartitionSuffix
	}
	if c.State.WatermarkTopic == "" && c.Source.Group != "" && c.PublishesWatermarks() {
		c.State.WatermarkTopic = c.Source.Group + watermarkSuffix
	}
}

// readPasswordFile sets the SASL password from password_file, without the
// trailing line break editors and `echo` leave.
func (c *Config) readPasswordFile() error {
	path := c.Source.SASL.PasswordFile
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return &KeyError{Key: "source.sasl.password_file", Value: path, Reason: fmt.Sprintf("cannot read: %v", err)}
	}
	password := strings.TrimRight(string(data), "\r\n")
	if password == "" {
		return &KeyError{Key: "source.sasl.password_file", Value: path, Reason: "the file is empty"}
	}
	c.Source.SASL.Password = password
	return nil
}
