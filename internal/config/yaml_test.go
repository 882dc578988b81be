package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestYAMLRoundTrip(t *testing.T) {
	dir := t.TempDir()
	pem := filepath.Join(dir, "ca.pem")
	pw := filepath.Join(dir, "password")
	for _, f := range []string{pem, pw} {
		if err := os.WriteFile(f, []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := map[string][]byte{
		"minimal": doc(nil),
		"example": readFile(t, "../../examples/calls.yaml"),
		"sliding, punctuated, quantile": doc(map[string]string{
			"watermark":  "{strategy: punctuated, marker_field: wm, max_out_of_orderness: 1h30m, idle_timeout: 1m, idle_advance: true}",
			"window":     "{type: sliding, size: 1m, slide: 10s, offset: -1500ms, emit: on_close}",
			"aggregates": "[{name: p99, fn: quantile, field: latency, q: 0.99}, {name: tiny, fn: quantile, field: x, q: 1e-9}, {name: c, fn: count}]",
		}),
		"session with a gap field": doc(map[string]string{
			"window": "{type: session, gap: 30s, gap_field: idle, allowed_lateness: 1m, emit: on_close}",
		}),
		"text that looks like other types": doc(map[string]string{
			"source": "{group: '123', topics: ['yes', 'null', '1.5', '~', ''], timestamp: {field: 'true'}, key: ['#a', 'b: c', '- d'], filter: [{field: x, equals: ''}, {field: y, equals: 'off'}]}",
			"sink":   "{results_topic: 'on', late_topic: '0x10', dead_letter_topic: '2006-01-02'}",
		}),
		"state": doc(map[string]string{
			"source": "{group: g, timestamp: {field: t}}",
			"state":  "{changelog_topic: g.state, commit_interval: 1s500ms, transaction_timeout: 15m}",
		}),
		"state with at_least_once": doc(map[string]string{"delivery": "at_least_once", "state": "{commit_interval: 5m}"}),
		"tls and password file": doc(map[string]string{
			"source": "{timestamp: {field: t}, tls: {enabled: true, ca_file: " + pem + ", cert_file: " + pem + ", key_file: " + pem + ", insecure_skip_verify: true}, sasl: {mechanism: SCRAM-SHA-256, username: u, password_file: " + pw + "}}",
		}),
		"oauth endpoint, extensions and rack": doc(map[string]string{
			"source": "{timestamp: {field: t}, rack: use1-az1, sasl: {mechanism: OAUTHBEARER, oauth: {token_endpoint: 'https://idp/token', client_id: c, client_secret_file: " + pw + ", scope: 'kafka read', ca_file: " + pem + ", extensions: {logicalCluster: lkc-1, identityPoolId: 'pool 2'}}}}",
		}),
		"oauth token file": doc(map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER, oauth: {token_file: " + pw + "}}}"}),
		"msk iam":          doc(map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: AWS_MSK_IAM, aws: {region: eu-west-1}}}"}),
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse(data, nil)
			if err != nil {
				t.Fatalf("Parse(%q) = %v", data, err)
			}
			again, err := Parse(c.YAML(), nil)
			if err != nil || !reflect.DeepEqual(again, c) {
				t.Errorf("Parse(YAML()) = %+v, %v; want %+v\nYAML:\n%s", again, err, c, c.YAML())
			}
		})
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestYAMLLeavesOutKeysThatDoNotApply(t *testing.T) {
	c, err := Parse(doc(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := string(c.YAML())
	for _, key := range []string{"slide:", "marker_field:", "csv:", "q:", "field: ''", "ca_file:", "username:", "password"} {
		if strings.Contains(out, key) {
			t.Errorf("YAML() contains %q, which does not apply:\n%s", key, out)
		}
	}
}

func TestYAMLState(t *testing.T) {
	tests := map[string]struct {
		sections map[string]string
		want     string
	}{
		"exactly_once": {map[string]string{"source": "{group: g, timestamp: {field: t}}"},
			"state:\n  changelog_topic: g-changelog\n  repartition_topic: g-repartition\n  repartition_partitions: 0\n  repartition_format: 3\n  commit_interval: 100ms\n  transaction_timeout: 10s\n  standby_replicas: 0\n  config_version: 0\n"},
		"at_least_once leaves out transaction_timeout": {map[string]string{"source": "{group: g, timestamp: {field: t}}", "delivery": "at_least_once"},
			"state:\n  changelog_topic: g-changelog\n  repartition_topic: g-repartition\n  repartition_partitions: 0\n  repartition_format: 3\n  commit_interval: 100ms\n  standby_replicas: 0\n  config_version: 0\n"},
		"scope partition leaves out the watermark topic": {map[string]string{"source": "{group: g, timestamp: {field: t}, key: [$key]}", "watermark": "{scope: partition}"},
			"state:\n  changelog_topic: g-changelog\n  commit_interval: 100ms\n  transaction_timeout: 10s\n  standby_replicas: 0\n  config_version: 0\n"},
		"by_key leaves out the repartition topic": {map[string]string{"source": "{group: g, timestamp: {field: t}, key: [$key]}"},
			"state:\n  changelog_topic: g-changelog\n  watermark_topic: g-watermarks\n  commit_interval: 100ms\n  transaction_timeout: 10s\n  standby_replicas: 0\n  config_version: 0\n"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse(doc(tt.sections), nil)
			if out := string(c.YAML()); err != nil || !strings.HasSuffix(out, tt.want) {
				t.Errorf("Parse(%q).YAML() = %v\n%s\nwant it to end with\n%s", doc(tt.sections), err, out, tt.want)
			}
		})
	}
}

func TestSASLPassword(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte("s3cr3t\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		sasl, yamlHas, want string
	}{
		"inline":    {"{mechanism: PLAIN, username: u, password: s3cr3t}", "password: <redacted>", "s3cr3t"},
		"from file": {"{mechanism: PLAIN, username: u, password_file: " + pw + "}", "password_file: " + pw, "s3cr3t"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse(doc(map[string]string{"source": "{timestamp: {field: t}, sasl: " + tt.sasl + "}"}), nil)
			out := string(c.YAML())
			if err != nil || c.Source.SASL.Password != tt.want || !strings.Contains(out, tt.yamlHas) || strings.Contains(out, tt.want) {
				t.Errorf("Parse(sasl: %s) password = %q, %v; YAML:\n%s\nwant password %q and YAML with %q and without the secret",
					tt.sasl, c.Source.SASL.Password, err, out, tt.want, tt.yamlHas)
			}
		})
	}
}

func TestLoadExample(t *testing.T) {
	c, err := Load("../../examples/calls.yaml", nil)
	if err != nil {
		t.Fatalf("Load(examples/calls.yaml) = %v", err)
	}
	want := Source{
		Brokers: []string{"localhost:9092"}, Topics: []string{"calls"}, Group: "calls-aggregator",
		StartOffset: "earliest", Format: "csv", Partitioning: "auto",
		CSV:            CSV{Columns: []string{"sid", "callType", "callTime", "duration"}, Delimiter: ","},
		Key:            []string{"sid"},
		Timestamp:      Timestamp{Field: "callTime", Layout: "2006-01-02 15:04:05", Timezone: "UTC"},
		Filter:         []Filter{{Field: "callType", Equals: "success"}},
		SessionTimeout: 45 * time.Second,
	}
	checks := map[string]struct{ got, want any }{
		"source":     {c.Source, want},
		"window":     {c.Window, Window{Type: "tumbling", Size: 5 * time.Second, AllowedLateness: 2 * time.Second, Emit: "on_watermark"}},
		"watermark":  {c.Watermark, Watermark{Strategy: "bounded", Scope: "global"}},
		"aggregates": {c.Aggregates, []Aggregate{{Name: "total_duration", Fn: "sum", Field: "duration"}}},
		"sink topics": {[]string{c.Sink.ResultsTopic, c.Sink.LateTopic, c.Sink.DeadLetterTopic},
			[]string{"calls-windows", "calls-late", "calls-dlq"}},
		"delivery":      {c.Delivery, "exactly_once"},
		"state":         {c.State, State{ChangelogTopic: "calls-aggregator-changelog", RepartitionTopic: "calls-aggregator-repartition", RepartitionFormat: 3, CommitInterval: 100 * time.Millisecond, TransactionTimeout: 10 * time.Second}},
		"ValidateKafka": {c.ValidateKafka(), nil},
	}
	for name, check := range checks {
		if !reflect.DeepEqual(check.got, check.want) {
			t.Errorf("Load(examples/calls.yaml) %s = %+v, want %+v", name, check.got, check.want)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), nil); !errors.Is(err, ErrInvalid) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrInvalid and os.ErrNotExist", err)
	}
}

func TestValidateKafka(t *testing.T) {
	tests := map[string]struct {
		mutate func(*Config)
		key    string
	}{
		"no brokers":                      {func(c *Config) { c.Source.Brokers = []string{} }, "source.brokers"},
		"empty broker":                    {func(c *Config) { c.Source.Brokers = []string{"a:9092", ""} }, "source.brokers[1]"},
		"no topics":                       {func(c *Config) { c.Source.Topics = nil }, "source.topics"},
		"repeated topic":                  {func(c *Config) { c.Source.Topics = []string{"calls", "calls"} }, "source.topics[1]"},
		"no group":                        {func(c *Config) { c.Source.Group = "" }, "source.group"},
		"no results topic":                {func(c *Config) { c.Sink.ResultsTopic = "" }, "sink.results_topic"},
		"no late topic":                   {func(c *Config) { c.Sink.LateTopic = "" }, "sink.late_topic"},
		"results is an input":             {func(c *Config) { c.Sink.ResultsTopic = "calls" }, "sink.results_topic"},
		"dead letter is input":            {func(c *Config) { c.Sink.DeadLetterTopic = "calls" }, "sink.dead_letter_topic"},
		"late same as results":            {func(c *Config) { c.Sink.LateTopic = c.Sink.ResultsTopic }, "sink.late_topic"},
		"dead letter same as late":        {func(c *Config) { c.Sink.DeadLetterTopic = c.Sink.LateTopic }, "sink.dead_letter_topic"},
		"no changelog topic":              {func(c *Config) { c.State.ChangelogTopic = "" }, "state.changelog_topic"},
		"changelog is an input":           {func(c *Config) { c.State.ChangelogTopic = "calls" }, "state.changelog_topic"},
		"changelog is results":            {func(c *Config) { c.State.ChangelogTopic = c.Sink.ResultsTopic }, "state.changelog_topic"},
		"changelog is late":               {func(c *Config) { c.State.ChangelogTopic = c.Sink.LateTopic }, "state.changelog_topic"},
		"changelog is dead letter":        {func(c *Config) { c.State.ChangelogTopic = c.Sink.DeadLetterTopic }, "state.changelog_topic"},
		"changelog with a space":          {func(c *Config) { c.State.ChangelogTopic = "calls changelog" }, "state.changelog_topic"},
		"changelog with a slash":          {func(c *Config) { c.State.ChangelogTopic = "calls/changelog" }, "state.changelog_topic"},
		"changelog non-ASCII":             {func(c *Config) { c.State.ChangelogTopic = "calls-änderungen" }, "state.changelog_topic"},
		"changelog is ..":                 {func(c *Config) { c.State.ChangelogTopic = ".." }, "state.changelog_topic"},
		"changelog too long":              {func(c *Config) { c.State.ChangelogTopic = strings.Repeat("c", 250) }, "state.changelog_topic"},
		"no repartition topic":            {repartition(func(c *Config) { c.State.RepartitionTopic = "" }), "state.repartition_topic"},
		"repartition is an input":         {repartition(func(c *Config) { c.State.RepartitionTopic = "calls" }), "state.repartition_topic"},
		"repartition is changelog":        {repartition(func(c *Config) { c.State.RepartitionTopic = c.State.ChangelogTopic }), "state.repartition_topic"},
		"repartition is results":          {repartition(func(c *Config) { c.State.RepartitionTopic = c.Sink.ResultsTopic }), "state.repartition_topic"},
		"repartition with a space":        {repartition(func(c *Config) { c.State.RepartitionTopic = "calls re" }), "state.repartition_topic"},
		"negative repartition partitions": {repartition(func(c *Config) { c.State.RepartitionPartitions = -1 }), "state.repartition_partitions"},
		"unknown repartition format":      {repartition(func(c *Config) { c.State.RepartitionFormat = 4 }), "state.repartition_format"},
		"no watermark topic":              {byKey(func(c *Config) { c.State.WatermarkTopic = "" }), "state.watermark_topic"},
		"watermark is an input":           {byKey(func(c *Config) { c.State.WatermarkTopic = "calls" }), "state.watermark_topic"},
		"watermark is changelog":          {byKey(func(c *Config) { c.State.WatermarkTopic = c.State.ChangelogTopic }), "state.watermark_topic"},
		"watermark is late":               {byKey(func(c *Config) { c.State.WatermarkTopic = c.Sink.LateTopic }), "state.watermark_topic"},
		"watermark with a slash":          {byKey(func(c *Config) { c.State.WatermarkTopic = "calls/wm" }), "state.watermark_topic"},
	}
	base, err := Load("../../examples/calls.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := base
			c.Source.Brokers = append([]string(nil), base.Source.Brokers...)
			tt.mutate(&c)
			err := c.ValidateKafka()
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Key != tt.key || !errors.Is(err, ErrInvalid) {
				t.Errorf("ValidateKafka() = %v, want a *KeyError for %s", err, tt.key)
			}
		})
	}
}

// repartition makes a mutation of a by_key config one of a repartition config.
func repartition(mutate func(*Config)) func(*Config) {
	return func(c *Config) {
		c.Source.Partitioning, c.State.RepartitionTopic = "repartition", c.Source.Group+"-repartition"
		mutate(c)
	}
}

// byKey makes a mutation of a repartition config one of a by_key config
// with watermark.scope global, which publishes to the watermark topic.
func byKey(mutate func(*Config)) func(*Config) {
	return func(c *Config) {
		c.Source.Partitioning, c.State.WatermarkTopic = "by_key", c.Source.Group+"-watermarks"
		mutate(c)
	}
}

func TestValidateKafkaChangelogTopic(t *testing.T) {
	base, err := Load("../../examples/calls.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		group, topic, want string // want "" for no error
	}{
		"default":              {"calls-aggregator", "calls-aggregator-changelog", ""},
		"249 characters":       {"g", strings.Repeat("c", 249), ""},
		"dots and underscores": {"g", "a.b_c-D9", ""},
		"default from a group with a space": {"calls aggregator", "calls aggregator-changelog",
			`state.changelog_topic = "calls aggregator-changelog": must be a Kafka topic name: 1 to 249 characters from a-z, A-Z, 0-9, '.', '_' and '-', not "." or ".."; the default, source.group + "-changelog", is not one: set state.changelog_topic`},
		"set with a space": {"g", "calls changelog",
			`state.changelog_topic = "calls changelog": must be a Kafka topic name: 1 to 249 characters from a-z, A-Z, 0-9, '.', '_' and '-', not "." or ".."`},
		"same as results": {"g", "calls-windows", `state.changelog_topic = "calls-windows": must differ from sink.results_topic`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := base
			c.Source.Group, c.State.ChangelogTopic = tt.group, tt.topic
			err := c.ValidateKafka()
			if got := fmt.Sprint(err); err == nil && tt.want != "" || err != nil && got != tt.want {
				t.Errorf("ValidateKafka() with state.changelog_topic %q = %v, want %q", tt.topic, err, tt.want)
			}
		})
	}
}

func TestValidateKafkaNamesVariable(t *testing.T) {
	c, err := Parse(doc(nil), nil)
	want := `source.brokers = "[]": required to connect to Kafka (set it in the file or with AGGREGATOR_SOURCE_BROKERS)`
	if err != nil || c.ValidateKafka() == nil || c.ValidateKafka().Error() != want {
		t.Errorf("ValidateKafka() = %v, %v; want %s", err, c.ValidateKafka(), want)
	}
}
