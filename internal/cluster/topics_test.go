package cluster_test

import (
	"context"
	"errors"
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
