package config

import "time"

// Config is the whole service configuration (docs/configuration.md). Load returns it
// defaulted and validated; every other package takes it as given.
type Config struct {
	Source          Source        `yaml:"source"`
	Watermark       Watermark     `yaml:"watermark"`
	Window          Window        `yaml:"window"`
	Aggregates      []Aggregate   `yaml:"aggregates"`
	Sink            Sink          `yaml:"sink"`
	Delivery        string        `yaml:"delivery"` // exactly_once | at_least_once
	HTTP            HTTP          `yaml:"http"`
	Log             Log           `yaml:"log"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"` // bound on the drain after SIGTERM
	State           State         `yaml:"state"`
}

// Source says where records come from and how to read them.
type Source struct {
	Brokers     []string `yaml:"brokers"`
	Topics      []string `yaml:"topics"`
	Group       string   `yaml:"group"`
	StartOffset string   `yaml:"start_offset"` // earliest | latest
	Format      string   `yaml:"format"`       // json | csv | avro | protobuf | json_schema
	// SchemaRegistry is where avro, protobuf and json_schema values find
	// their schemas, and where sink.format avro registers the results'.
	SchemaRegistry SchemaRegistry `yaml:"schema_registry"`
	// Partitioning says how a group key's records reach one window state:
	// auto | by_key | repartition (see Source.ByKey).
	Partitioning string    `yaml:"partitioning"`
	CSV          CSV       `yaml:"csv"`
	Key          []string  `yaml:"key"` // field paths, "$key" for the Kafka record key; empty = one global key
	Timestamp    Timestamp `yaml:"timestamp"`
	Filter       []Filter  `yaml:"filter"`
	TLS          TLS       `yaml:"tls"`
	SASL         SASL      `yaml:"sasl"`
	// Rack is the client's rack (Kafka's client.rack, KIP-392): brokers
	// with a rack-aware replica selector serve its fetches from a replica
	// in the same rack (zone). "" is off.
	Rack string `yaml:"rack"`
	// InstanceID is the group.instance.id (static membership, KIP-345); ""
	// is off. A member restarted with the same id takes its partitions back
	// at once instead of after its session times out.
	InstanceID string `yaml:"instance_id"`
	// SessionTimeout is how long the group coordinator waits for a silent
	// member (a crashed one, or a static member being restarted) before it
	// gives its partitions to others.
	SessionTimeout time.Duration `yaml:"session_timeout"`
}

// CSV describes the columns of a CSV record.
type CSV struct {
	Columns   []string `yaml:"columns"`
	Delimiter string   `yaml:"delimiter"` // one character
}

// SchemaRegistry is a Confluent Schema Registry's REST endpoint. The
// password comes from Password or from PasswordFile, which is read again
// for every request so a rotated Secret is picked up without a restart; it
// is never printed or logged.
type SchemaRegistry struct {
	URL          string      `yaml:"url"` // http:// or https://
	Username     string      `yaml:"username"`
	Password     string      `yaml:"password"`
	PasswordFile string      `yaml:"password_file"`
	TLS          RegistryTLS `yaml:"tls"` // https only
}

// RegistryTLS configures an https registry connection: CAFile replaces the
// system roots, CertFile with KeyFile enable mutual TLS.
type RegistryTLS struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// Registry formats: values in Confluent's wire format.
const (
	FormatAvro       = "avro"
	FormatProtobuf   = "protobuf"
	FormatJSONSchema = "json_schema"
)

// UsesRegistry reports whether the config reads or writes schemas in
// source.schema_registry: a registry source.format, or sink.format avro.
func (c Config) UsesRegistry() bool {
	switch c.Source.Format {
	case FormatAvro, FormatProtobuf, FormatJSONSchema:
		return true
	}
	return c.Sink.Format == FormatAvro
}

// Timestamp says where the event time is and how to parse it.
type Timestamp struct {
	Field    string `yaml:"field"`    // field path, or "$timestamp" for the Kafka record timestamp
	Layout   string `yaml:"layout"`   // Go layout, or unix_s | unix_ms | unix_us | unix_ns | rfc3339
	Timezone string `yaml:"timezone"` // IANA name, for layouts without a zone
}

// Filter keeps a record only when Field equals Equals (compared as text).
type Filter struct {
	Field  string `yaml:"field"`
	Equals string `yaml:"equals"`
}

// TLS configures an encrypted connection to the brokers.
type TLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// SASL configures broker authentication. The password comes from Password
// (usually set by AGGREGATOR_SOURCE_SASL_PASSWORD) or from PasswordFile;
// it is never printed or logged. Username and password are PLAIN's and
// SCRAM's, OAuth is OAUTHBEARER's, AWS is AWS_MSK_IAM's.
type SASL struct {
	Mechanism    string `yaml:"mechanism"` // "" (off) | PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 | OAUTHBEARER | AWS_MSK_IAM
	Username     string `yaml:"username"`
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
	OAuth        OAuth  `yaml:"oauth"`
	AWS          AWS    `yaml:"aws"`
}

// SASL mechanisms, the values of source.sasl.mechanism.
const (
	MechanismPlain       = "PLAIN"
	MechanismScram256    = "SCRAM-SHA-256"
	MechanismScram512    = "SCRAM-SHA-512"
	MechanismOAuthBearer = "OAUTHBEARER"
	MechanismAWSMSKIAM   = "AWS_MSK_IAM"
)

// OAuth is where OAUTHBEARER's token comes from: TokenFile, read again
// when it changes, or TokenEndpoint, an OAuth 2.0 client-credentials grant
// (ClientID with ClientSecret or ClientSecretFile, Scope). Extensions are
// the SASL extensions sent with the token (RFC 7628), such as Confluent
// Cloud's logicalCluster and identityPoolId.
type OAuth struct {
	TokenFile        string            `yaml:"token_file"`
	TokenEndpoint    string            `yaml:"token_endpoint"`
	ClientID         string            `yaml:"client_id"`
	ClientSecret     string            `yaml:"client_secret"`
	ClientSecretFile string            `yaml:"client_secret_file"`
	Scope            string            `yaml:"scope"`
	CAFile           string            `yaml:"ca_file"` // the token endpoint's CA; "" = the system roots
	Extensions       map[string]string `yaml:"extensions"`
}

// AWS is AWS_MSK_IAM's: the credentials come from the AWS SDK's default
// chain (environment, web identity, EKS Pod Identity, ECS and EC2 roles).
type AWS struct {
	Region string `yaml:"region"` // Parse fills in $AWS_REGION when empty
}

// Watermark configures the per-partition watermark generators (docs/semantics.md#watermarks).
type Watermark struct {
	Strategy          string        `yaml:"strategy"` // bounded | punctuated
	MaxOutOfOrderness time.Duration `yaml:"max_out_of_orderness"`
	MarkerField       string        `yaml:"marker_field"` // punctuated only
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	IdleAdvance       bool          `yaml:"idle_advance"`
	MaxFutureSkew     time.Duration `yaml:"max_future_skew"`
	// Scope is whose watermark a window follows (docs/scaling.md#watermarkscope-the-groups-watermark-or-each-partitions-own): global, the
	// minimum over every input partition of the group (Flink's), or
	// partition, the watermark of the partition its records came from
	// (by_key only).
	Scope string `yaml:"scope"`
}

// Window configures the window assigner and firing.
type Window struct {
	Type            string        `yaml:"type"`      // tumbling | sliding | session | global | count
	Size            time.Duration `yaml:"size"`      // tumbling and sliding
	Slide           time.Duration `yaml:"slide"`     // sliding only
	Offset          time.Duration `yaml:"offset"`    // tumbling and sliding
	Gap             time.Duration `yaml:"gap"`       // session only
	GapField        string        `yaml:"gap_field"` // session only, optional: a per-record gap
	AllowedLateness time.Duration `yaml:"allowed_lateness"`
	Emit            string        `yaml:"emit"` // on_watermark | on_close
	// Calendar windows, early firings and global windows: see windows.go.
	Calendar     string       `yaml:"calendar"` // tumbling only: "" | day | week | month
	Timezone     string       `yaml:"timezone"` // calendar windows: an IANA name, default UTC
	EarlyFirings EarlyFirings `yaml:"early_firings"`
	// Count windows: size and slide are records (written as whole
	// numbers; held as that many ms), timeout a duration.
	Timeout time.Duration `yaml:"timeout"`
}

// EarlyFirings configures results of windows before they are due
// (docs/windows.md#early-firings-results-before-a-window-is-due).
type EarlyFirings struct {
	Every time.Duration `yaml:"every"` // 0 = off
	Time  string        `yaml:"time"`  // processing (default) | event
}

// AggregateNames returns the aggregates' names, in order: the fields of a
// result's "aggregates" object.
func (c Config) AggregateNames() []string {
	names := make([]string, len(c.Aggregates))
	for i, a := range c.Aggregates {
		names[i] = a.Name
	}
	return names
}

// Aggregate is one output column: Fn over Field, named Name.
type Aggregate struct {
	Name  string  `yaml:"name"`
	Fn    string  `yaml:"fn"` // count | sum | min | max | avg | first | last | count_distinct | quantile | top_k
	Field string  `yaml:"field"`
	Q     float64 `yaml:"q"` // quantile only, in (0, 1]: nearest rank ceil(q*n)
	K     int     `yaml:"k"` // top_k only, > 0: how many values
}

// Sink names the output topics and how they are produced and created.
type Sink struct {
	ResultsTopic      string        `yaml:"results_topic"`
	LateTopic         string        `yaml:"late_topic"`
	DeadLetterTopic   string        `yaml:"dead_letter_topic"` // optional
	Format            string        `yaml:"format"`            // json | avro (result values in the wire format, schema registered under <results_topic>-value)
	Compression       string        `yaml:"compression"`       // none | gzip | snappy | lz4 | zstd
	Linger            time.Duration `yaml:"linger"`
	CreateTopics      bool          `yaml:"create_topics"`      // create missing output topics at start
	Partitions        int32         `yaml:"partitions"`         // for created topics
	ReplicationFactor int16         `yaml:"replication_factor"` // for created topics; -1 = broker default
}

// State configures durable window state and commits (docs/delivery.md).
type State struct {
	ChangelogTopic string `yaml:"changelog_topic"` // default "<source.group>-changelog"
	// The repartition topic of source.partitioning repartition (docs/scaling.md#the-repartition-stage):
	// default "<source.group>-repartition", and as many partitions as the
	// input topics have in all (0).
	RepartitionTopic      string `yaml:"repartition_topic"`
	RepartitionPartitions int32  `yaml:"repartition_partitions"`
	// RepartitionFormat is the format stage 1 writes its records in: 3
	// (the default: records the filter rejects are forwarded too, and
	// stage 2 filters per generation), 2 (0 in a Config built in code:
	// stage 1 filters) or 1, which releases before format 3 and 2 read,
	// for a rolling upgrade from one. Stage 2 reads all three.
	RepartitionFormat int32 `yaml:"repartition_format"`
	// The compacted topic where by_key instances publish their partitions'
	// watermarks (watermark.scope global, docs/scaling.md#the-watermark-topic): default
	// "<source.group>-watermarks".
	WatermarkTopic     string        `yaml:"watermark_topic"`
	CommitInterval     time.Duration `yaml:"commit_interval"`     // default 100ms: how often state, outputs and offsets are committed
	TransactionTimeout time.Duration `yaml:"transaction_timeout"` // default 10s (as Kafka Streams): exactly_once only; the broker aborts a transaction open longer than this
	// StandbyReplicas is how many instances besides its owner keep a
	// warm copy of each state partition (they tail its changelog and
	// never write), so that a partition moves to one that applies only
	// the changelog's tail (docs/scaling.md#standby-state). Default 0.
	StandbyReplicas int `yaml:"standby_replicas"`
	// ConfigVersion orders configs across a rollout (docs/changing-config.md#stateconfig_version-rollouts-and-rollbacks): a higher
	// version with other state settings starts a new generation, an equal
	// one with other state settings is refused, a lower one runs the
	// partition's newest stored generation. Not negative; default 0.
	ConfigVersion int64 `yaml:"config_version"`
	// Cutover is the event time, RFC 3339 in whole milliseconds, at which
	// a new generation takes over in every partition ("" = each partition
	// cuts over as soon as it can): see CutoverMillis.
	Cutover string `yaml:"cutover"`
}

// HTTP is the metrics and probes endpoint.
type HTTP struct {
	Listen string `yaml:"listen"`
	// Pprof serves Go's profiles (net/http/pprof) under /debug/pprof/ on
	// the same listener, for profiling a running service; off by default.
	Pprof bool `yaml:"pprof"`
}

// Log configures zerolog.
type Log struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // json | console
}
