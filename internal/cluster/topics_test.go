package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
)

func newAdmin(t *testing.T, kc *kfake.Cluster, opts ...kgo.Opt) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatalf("NewClient() = %v", err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func ctxTimeout(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestVerifyInputs(t *testing.T) {
	kc := kfake.MustCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "calls", "sms"))
	defer kc.Close()
	adm := newAdmin(t, kc)

	if err := cluster.VerifyInputs(ctxTimeout(t), adm, []string{"calls", "sms"}); err != nil {
		t.Errorf("VerifyInputs(calls, sms) = %v, want nil", err)
	}
	err := cluster.VerifyInputs(ctxTimeout(t), adm, []string{"calls", "clicks", "views"})
	if !errors.Is(err, cluster.ErrTopicsMissing) || !strings.Contains(err.Error(), "clicks, views") {
		t.Errorf("VerifyInputs(calls, clicks, views) = %v, want ErrTopicsMissing naming clicks, views", err)
	}
	if want := "kafka-topics.sh --bootstrap-server HOST:9092 --create --topic clicks"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("VerifyInputs(calls, clicks, views) = %v, want it to say how to create one (%s)", err, want)
	}
}

func TestEnsureOutputsCreatesCompactedResults(t *testing.T) {
	kc := kfake.MustCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "calls-late"))
	defer kc.Close()
	adm := newAdmin(t, kc)
	sink := config.Sink{ResultsTopic: "calls-windows", LateTopic: "calls-late", DeadLetterTopic: "calls-dlq",
		CreateTopics: true, Partitions: 3, ReplicationFactor: 1}

	for range 2 { // the second call finds everything there
		if err := cluster.EnsureOutputs(ctxTimeout(t), adm, sink); err != nil {
			t.Fatalf("EnsureOutputs() = %v", err)
		}
	}
	fresh := newAdmin(t, kc) // its metadata cache has never seen the topics missing
	details, err := fresh.ListTopics(ctxTimeout(t), "calls-windows", "calls-late", "calls-dlq")
	if err != nil {
		t.Fatalf("ListTopics() = %v", err)
	}
	wantPartitions := map[string]int{"calls-windows": 3, "calls-late": 1, "calls-dlq": 3}
	for topic, want := range wantPartitions {
		if got := len(details[topic].Partitions); got != want {
			t.Errorf("topic %s has %d partitions, want %d", topic, got, want)
		}
	}
	configs, err := fresh.DescribeTopicConfigs(ctxTimeout(t), "calls-windows", "calls-dlq")
	if err != nil {
		t.Fatalf("DescribeTopicConfigs() = %v", err)
	}
	wantPolicy := map[string]string{"calls-windows": "compact", "calls-dlq": "delete"}
	for _, rc := range configs {
		if got := cleanupPolicy(rc); got != wantPolicy[rc.Name] {
			t.Errorf("topic %s cleanup.policy = %q, want %q", rc.Name, got, wantPolicy[rc.Name])
		}
	}
}

func cleanupPolicy(rc kadm.ResourceConfig) string {
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" {
			return c.MaybeValue()
		}
	}
	return "delete" // Kafka's default when the broker does not list it
}

func TestEnsureOutputsWithoutCreateTopics(t *testing.T) {
	kc := kfake.MustCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "calls-windows"))
	defer kc.Close()
	adm := newAdmin(t, kc)
	sink := config.Sink{ResultsTopic: "calls-windows", LateTopic: "calls-late", DeadLetterTopic: "calls-dlq"}

	err := cluster.EnsureOutputs(ctxTimeout(t), adm, sink)
	if !errors.Is(err, cluster.ErrTopicsNotPermitted) || !strings.Contains(err.Error(), "calls-late, calls-dlq") {
		t.Errorf("EnsureOutputs(create_topics false) = %v, want ErrTopicsNotPermitted naming calls-late, calls-dlq", err)
	}
	sink.DeadLetterTopic, sink.LateTopic = "", "calls-windows"
	if err := cluster.EnsureOutputs(ctxTimeout(t), adm, sink); err != nil {
		t.Errorf("EnsureOutputs(all present, create_topics false) = %v, want nil", err)
	}
}

// TestTopicsNotPermitted runs against a broker with ACLs: "reader" may
// describe every topic but create none; "stranger" may do nothing.
func TestTopicsNotPermitted(t *testing.T) {
	describeAll := kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "*",
		Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationDescribe, Allow: true}
	kc := kfake.MustCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin-pw"),
		kfake.User("PLAIN", "reader", "reader-pw", describeAll),
		kfake.User("PLAIN", "stranger", "stranger-pw"),
		kfake.SeedTopics(1, "calls"),
	)
	defer kc.Close()
	sink := config.Sink{ResultsTopic: "calls-windows", LateTopic: "calls-late", CreateTopics: true, Partitions: 1, ReplicationFactor: 1}

	tests := map[string]struct {
		user, password, wantStep string
		check                    func(context.Context, *kadm.Client) error
	}{
		"create denied":   {"reader", "reader-pw", "create topic calls-windows", func(ctx context.Context, adm *kadm.Client) error { return cluster.EnsureOutputs(ctx, adm, sink) }},
		"describe denied": {"stranger", "stranger-pw", "check output topics", func(ctx context.Context, adm *kadm.Client) error { return cluster.EnsureOutputs(ctx, adm, sink) }},
		"inputs denied": {"stranger", "stranger-pw", "check input topics", func(ctx context.Context, adm *kadm.Client) error {
			return cluster.VerifyInputs(ctx, adm, []string{"calls"})
		}},
		"input partitions denied": {"stranger", "stranger-pw", "count input partitions", func(ctx context.Context, adm *kadm.Client) error {
			_, err := cluster.InputPartitions(ctx, adm, []string{"calls"})
			return err
		}},
		"changelog create denied": {"reader", "reader-pw", "create topic calls-agg-changelog", func(ctx context.Context, adm *kadm.Client) error {
			return cluster.EnsureChangelog(ctx, adm, "calls-agg-changelog", 1, "", sink)
		}},
		// Checking an existing changelog's cleanup.policy needs DescribeConfigs
		// on it, which Describe does not grant ("calls" stands in for it).
		"changelog configs denied": {"reader", "reader-pw", "check changelog topic", func(ctx context.Context, adm *kadm.Client) error {
			return cluster.EnsureChangelog(ctx, adm, "calls", 1, "", sink)
		}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			mech, err := cluster.SASLMechanism(config.SASL{Mechanism: "PLAIN", Username: tt.user, Password: tt.password})
			if err != nil {
				t.Fatal(err)
			}
			adm := newAdmin(t, kc, kgo.SASL(mech))
			err = tt.check(ctxTimeout(t), adm)
			if !errors.Is(err, cluster.ErrTopicsNotPermitted) || !strings.Contains(err.Error(), tt.wantStep) {
				t.Errorf("%s as %s = %v, want ErrTopicsNotPermitted from %q", name, tt.user, err, tt.wantStep)
			}
		})
	}
}

func TestInputPartitions(t *testing.T) {
	kc := kfake.MustCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "calls"))
	defer kc.Close()
	if err := kc.CreateTopic("sms", 3, nil); err != nil {
		t.Fatal(err)
	}
	adm := newAdmin(t, kc)

	got, err := cluster.InputPartitions(ctxTimeout(t), adm, []string{"sms", "calls"})
	if want := []int32{3, 2}; err != nil || !slices.Equal(got, want) {
		t.Errorf("InputPartitions(sms, calls) = %v, %v; want %v", got, err, want)
	}
	_, err = cluster.InputPartitions(ctxTimeout(t), adm, []string{"calls", "clicks", "views"})
	if !errors.Is(err, cluster.ErrTopicsMissing) || !strings.Contains(err.Error(), "clicks, views") {
		t.Errorf("InputPartitions(calls, clicks, views) = %v, want ErrTopicsMissing naming clicks, views", err)
	}
}

func TestEnsureChangelogCreatesCompacted(t *testing.T) {
	kc := kfake.MustCluster(kfake.NumBrokers(1))
	defer kc.Close()
	adm := newAdmin(t, kc)
	sink := config.Sink{CreateTopics: true, Partitions: 1, ReplicationFactor: 1}

	for range 2 { // the second call finds it there, and right
		if err := cluster.EnsureChangelog(ctxTimeout(t), adm, "calls-agg-changelog", 4, "", sink); err != nil {
			t.Fatalf("EnsureChangelog(calls-agg-changelog, 4) = %v", err)
		}
	}
	fresh := newAdmin(t, kc) // its metadata cache has never seen the topic missing
	details, err := fresh.ListTopics(ctxTimeout(t), "calls-agg-changelog")
	if err != nil {
		t.Fatalf("ListTopics() = %v", err)
	}
	if got := len(details["calls-agg-changelog"].Partitions); got != 4 {
		t.Errorf("changelog topic has %d partitions, want 4 (not sink.partitions)", got)
	}
	configs, err := fresh.DescribeTopicConfigs(ctxTimeout(t), "calls-agg-changelog")
	if err != nil || len(configs) != 1 {
		t.Fatalf("DescribeTopicConfigs() = %v, %v", configs, err)
	}
	if got := cleanupPolicy(configs[0]); got != "compact" {
		t.Errorf("changelog topic cleanup.policy = %q, want compact", got)
	}
}

// TestEnsureChangelogExisting checks an existing changelog topic of 4
// partitions against the 4 state partitions it must mirror: input
// partitions, or with a repartition stage the repartition topic's.
func TestEnsureChangelogExisting(t *testing.T) {
	tests := map[string]struct {
		partitions  int32
		configs     map[string]string
		repartition string
		wantErr     error
		wantText    string
	}{
		"compacted":       {4, map[string]string{"cleanup.policy": "compact"}, "", nil, ""},
		"compact, delete": {4, map[string]string{"cleanup.policy": "compact,delete"}, "", nil, ""},
		"too few": {3, map[string]string{"cleanup.policy": "compact"}, "", cluster.ErrChangelogMismatch,
			"changelog topic calls-agg-changelog has 3 partitions, the input topics have 4 in all (one changelog partition per input partition): delete it or create it with 4"},
		"too many": {5, map[string]string{"cleanup.policy": "compact"}, "", cluster.ErrChangelogMismatch, "has 5 partitions, the input topics have 4 in all"},
		"repartition, too few": {3, map[string]string{"cleanup.policy": "compact"}, "calls-agg-repartition", cluster.ErrChangelogMismatch,
			"changelog topic calls-agg-changelog has 3 partitions, the repartition topic calls-agg-repartition has 4 (one changelog partition per repartition partition): delete it or create it with 4"},
		"repartition":       {4, map[string]string{"cleanup.policy": "compact"}, "calls-agg-repartition", nil, ""},
		"delete":            {4, map[string]string{"cleanup.policy": "delete"}, "", cluster.ErrChangelogMismatch, "changelog topic calls-agg-changelog has cleanup.policy=delete"},
		"broker default":    {4, nil, "", cluster.ErrChangelogMismatch, "has cleanup.policy=delete"},
		"create_topics off": {4, map[string]string{"cleanup.policy": "compact"}, "", nil, ""}, // exists, so nothing to create
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			kc := kfake.MustCluster(kfake.NumBrokers(1))
			defer kc.Close()
			if err := kc.CreateTopic("calls-agg-changelog", tt.partitions, tt.configs); err != nil {
				t.Fatal(err)
			}
			adm := newAdmin(t, kc)
			sink := config.Sink{CreateTopics: name != "create_topics off", Partitions: 1, ReplicationFactor: 1}

			err := cluster.EnsureChangelog(ctxTimeout(t), adm, "calls-agg-changelog", 4, tt.repartition, sink)
			if !errors.Is(err, tt.wantErr) || tt.wantErr == nil && err != nil || err != nil && !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("EnsureChangelog(%d partitions, %v, repartition %q; want 4) = %v, want %v with %q", tt.partitions, tt.configs, tt.repartition, err, tt.wantErr, tt.wantText)
			}
		})
	}
}

func TestEnsureChangelogWithoutCreateTopics(t *testing.T) {
	kc := kfake.MustCluster(kfake.NumBrokers(1))
	defer kc.Close()
	adm := newAdmin(t, kc)
	sink := config.Sink{Partitions: 1, ReplicationFactor: 1}

	err := cluster.EnsureChangelog(ctxTimeout(t), adm, "calls-agg-changelog", 4, "", sink)
	if !errors.Is(err, cluster.ErrTopicsNotPermitted) || !strings.Contains(err.Error(), "calls-agg-changelog") {
		t.Errorf("EnsureChangelog(missing, create_topics false) = %v, want ErrTopicsNotPermitted naming calls-agg-changelog", err)
	}
	details, err := adm.ListTopics(ctxTimeout(t), "calls-agg-changelog")
	if err != nil || details["calls-agg-changelog"].Err == nil {
		t.Errorf("ListTopics(calls-agg-changelog) = %v, %v; want the topic still missing", details, err)
	}
}

func TestMaxMessageBytes(t *testing.T) {
	kc := kfake.MustCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "calls-late"))
	defer kc.Close()
	if err := kc.CreateTopic("calls-dlq", 1, map[string]string{"max.message.bytes": "2048"}); err != nil {
		t.Fatal(err)
	}
	got, err := cluster.MaxMessageBytes(ctxTimeout(t), newAdmin(t, kc), "calls-late", "calls-dlq")
	want := map[string]int32{"calls-late": cluster.DefaultMaxMessageBytes, "calls-dlq": 2048}
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("MaxMessageBytes(calls-late, calls-dlq) = %v, %v; want %v", got, err, want)
	}
}

// TestEnsureRepartition creates the repartition topic with
// cleanup.policy=delete and the partitions asked for, finds it right the
// second time, and refuses one with another partition count (exit 2),
// saying what to set; without sink.create_topics a missing one is an error.
func TestEnsureRepartition(t *testing.T) {
	kc := kfake.MustCluster(kfake.NumBrokers(1))
	defer kc.Close()
	adm := newAdmin(t, kc)
	sink := config.Sink{CreateTopics: true, Partitions: 1, ReplicationFactor: 1}
	for range 2 {
		if err := cluster.EnsureRepartition(ctxTimeout(t), adm, "g-repartition", 6, sink); err != nil {
			t.Fatalf("EnsureRepartition(g-repartition, 6) = %v", err)
		}
	}
	fresh := newAdmin(t, kc)
	details, err := fresh.ListTopics(ctxTimeout(t), "g-repartition")
	if err != nil || len(details["g-repartition"].Partitions) != 6 {
		t.Fatalf("ListTopics() = %v, %v: want 6 partitions", details, err)
	}
	configs, err := fresh.DescribeTopicConfigs(ctxTimeout(t), "g-repartition")
	if err != nil || len(configs) != 1 || cleanupPolicy(configs[0]) != "delete" {
		t.Errorf("DescribeTopicConfigs() = %v, %v: want cleanup.policy delete", configs, err)
	}
	err = cluster.EnsureRepartition(ctxTimeout(t), adm, "g-repartition", 4, sink)
	if want := "repartition topic g-repartition has 6 partitions, state.repartition_partitions (or the input topics' count) is 4: set state.repartition_partitions to 6"; !errors.Is(err, cluster.ErrChangelogMismatch) || !strings.Contains(fmt.Sprint(err), want) {
		t.Errorf("EnsureRepartition(4) on 6 partitions = %v, want ErrChangelogMismatch with %q", err, want)
	}
	err = cluster.EnsureRepartition(ctxTimeout(t), adm, "other-repartition", 4, config.Sink{})
	if !errors.Is(err, cluster.ErrTopicsNotPermitted) {
		t.Errorf("EnsureRepartition(missing, create_topics false) = %v, want ErrTopicsNotPermitted", err)
	}
}

// TestEnsureWatermarks creates the watermark topic compacted with one
// partition, finds it right the second time, and refuses one with more
// partitions or without compaction (exit 2), saying what to do; without
// sink.create_topics a missing one is an error.
func TestEnsureWatermarks(t *testing.T) {
	kc := kfake.MustCluster(kfake.NumBrokers(1))
	defer kc.Close()
	adm := newAdmin(t, kc)
	sink := config.Sink{CreateTopics: true, Partitions: 3, ReplicationFactor: 1}
	for range 2 {
		if err := cluster.EnsureWatermarks(ctxTimeout(t), adm, "g-watermarks", sink); err != nil {
			t.Fatalf("EnsureWatermarks(g-watermarks) = %v", err)
		}
	}
	fresh := newAdmin(t, kc)
	details, err := fresh.ListTopics(ctxTimeout(t), "g-watermarks")
	if err != nil || len(details["g-watermarks"].Partitions) != 1 {
		t.Fatalf("ListTopics() = %v, %v: want 1 partition (not sink.partitions)", details, err)
	}
	configs, err := fresh.DescribeTopicConfigs(ctxTimeout(t), "g-watermarks")
	if err != nil || len(configs) != 1 || cleanupPolicy(configs[0]) != "compact" {
		t.Errorf("DescribeTopicConfigs() = %v, %v: want cleanup.policy compact", configs, err)
	}
	for name, tt := range map[string]struct {
		partitions int32
		configs    map[string]string
		want       string
	}{
		"two partitions": {2, map[string]string{"cleanup.policy": "compact"}, "watermark topic wm2 (state.watermark_topic) has 2 partitions, it needs 1"},
		"not compacted":  {1, map[string]string{"cleanup.policy": "delete"}, "watermark topic wm1 (state.watermark_topic) has cleanup.policy=delete"},
	} {
		topic := fmt.Sprintf("wm%d", tt.partitions)
		if err := kc.CreateTopic(topic, tt.partitions, tt.configs); err != nil {
			t.Fatal(err)
		}
		err := cluster.EnsureWatermarks(ctxTimeout(t), adm, topic, sink)
		if !errors.Is(err, cluster.ErrChangelogMismatch) || !strings.Contains(fmt.Sprint(err), tt.want) {
			t.Errorf("%s: EnsureWatermarks = %v, want ErrChangelogMismatch with %q", name, err, tt.want)
		}
	}
	err = cluster.EnsureWatermarks(ctxTimeout(t), adm, "other-watermarks", config.Sink{})
	if !errors.Is(err, cluster.ErrTopicsNotPermitted) || !strings.Contains(fmt.Sprint(err), "other-watermarks") {
		t.Errorf("EnsureWatermarks(missing, create_topics false) = %v, want ErrTopicsNotPermitted naming it", err)
	}
}
