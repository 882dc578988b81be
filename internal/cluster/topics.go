package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"aggregator/internal/config"
)

// ErrTopicsNotPermitted is wrapped by the errors of VerifyInputs and
// EnsureOutputs when the service may not do what it needs with its topics:
// the brokers deny describing or creating them (TopicAuthorizationFailed,
// ClusterAuthorizationFailed), or output topics are missing and
// sink.create_topics is false. It is a deployment error, not a transient
// one: main exits 2.
var ErrTopicsNotPermitted = errors.New("topics not permitted")

// ErrTopicsMissing is wrapped by the error of VerifyInputs and
// InputPartitions when input topics do not exist; the error names every one
// of them.
var ErrTopicsMissing = errors.New("topics missing")

// ErrChangelogMismatch is wrapped by the error of EnsureChangelog when the
// changelog topic exists but cannot hold the state: its partition count is
// not the one needed, or its cleanup.policy does not include compact. The
// error says what was found and what is needed. Only an operator can fix
// the topic: main exits 2.
var ErrChangelogMismatch = errors.New("changelog mismatch")

// VerifyInputs checks that every input topic exists, naming all the missing
// ones in one error rather than failing on the first.
func VerifyInputs(ctx context.Context, adm *kadm.Client, topics []string) error {
	missing, err := missingTopics(ctx, adm, topics)
	if err != nil {
		return fmt.Errorf("check input topics: %w", err)
	}
	if len(missing) > 0 {
		return missingInputs(missing)
	}
	return nil
}

// missingInputs is the error for input topics that do not exist; it says
// how to create one, on a cluster and on `aggregator broker`.
func missingInputs(missing []string) error {
	return fmt.Errorf("source.topics: %w: %s\n  create them first, e.g. kafka-topics.sh --bootstrap-server HOST:9092 --create --topic %s --partitions 3;"+
		"\n  `aggregator broker` creates a topic when a producer first writes to it (kcat -P -b 127.0.0.1:9092 -t %s), or at start with --topics",
		ErrTopicsMissing, strings.Join(missing, ", "), missing[0], missing[0])
}

// InputPartitions returns the partition count of each input topic, in order.
// Missing topics give an error wrapping ErrTopicsMissing that names them all.
func InputPartitions(ctx context.Context, adm *kadm.Client, topics []string) ([]int32, error) {
	details, missing, err := describeTopics(ctx, adm, topics)
	if err != nil {
		return nil, fmt.Errorf("count input partitions: %w", err)
	}
	if len(missing) > 0 {
		return nil, missingInputs(missing)
	}
	counts := make([]int32, len(topics))
	for i, topic := range topics {
		counts[i] = int32(len(details[topic].Partitions))
	}
	return counts, nil
}

// EnsureChangelog creates the changelog topic if it is missing (compacted,
// `partitions` partitions, sink.replication_factor, only when
// sink.create_topics; otherwise an error wrapping ErrTopicsNotPermitted),
// and checks an existing one: its partition count must equal partitions
// and its cleanup.policy must include compact; otherwise an error wrapping
// ErrChangelogMismatch. The state partitions the changelog mirrors are the
// input partitions, or with a repartition stage the partitions of the
// repartition topic (repartition names it; "" for none). A topic created
// concurrently by another replica counts as created.
func EnsureChangelog(ctx context.Context, adm *kadm.Client, topic string, partitions int32, repartition string, sink config.Sink) error {
	details, missing, err := describeTopics(ctx, adm, []string{topic})
	if err != nil {
		return fmt.Errorf("check changelog topic: %w", err)
	}
	if len(missing) > 0 {
		if !sink.CreateTopics {
			return fmt.Errorf("%w: changelog topic %s does not exist and sink.create_topics is false: create it compacted with %d partitions",
				ErrTopicsNotPermitted, topic, partitions)
		}
		return createTopic(ctx, adm, topic, partitions, sink.ReplicationFactor, ChangelogTopicConfigs())
	}
	if got := int32(len(details[topic].Partitions)); got != partitions {
		mirrors := fmt.Sprintf("the input topics have %d in all (one changelog partition per input partition)", partitions)
		if repartition != "" {
			mirrors = fmt.Sprintf("the repartition topic %s has %d (one changelog partition per repartition partition)", repartition, partitions)
		}
		return fmt.Errorf("%w: changelog topic %s has %d partitions, %s: delete it or create it with %d",
			ErrChangelogMismatch, topic, got, mirrors, partitions)
	}
	policy, err := cleanupPolicy(ctx, adm, topic)
	if err != nil {
		return fmt.Errorf("check changelog topic: %w", err)
	}
	if !slices.Contains(policy, "compact") {
		return fmt.Errorf("%w: changelog topic %s has cleanup.policy=%s, which deletes state that is still needed: set cleanup.policy=compact",
			ErrChangelogMismatch, topic, strings.Join(policy, ","))
	}
	return nil
}

// EnsureRepartition checks the repartition topic of source.partitioning
// repartition, or creates it (cleanup.policy=delete: stage 2 deletes
// what it committed) with partitions partitions when sink.create_topics
// allows. A topic with another partition count is ErrChangelogMismatch:
// the group keys would land elsewhere than the state that holds them.
func EnsureRepartition(ctx context.Context, adm *kadm.Client, topic string, partitions int32, sink config.Sink) error {
	details, missing, err := describeTopics(ctx, adm, []string{topic})
	if err != nil {
		return fmt.Errorf("check repartition topic: %w", err)
	}
	if len(missing) > 0 {
		if !sink.CreateTopics {
			return fmt.Errorf("%w: repartition topic %s does not exist and sink.create_topics is false: create it with cleanup.policy=delete and %d partitions",
				ErrTopicsNotPermitted, topic, partitions)
		}
		return createTopic(ctx, adm, topic, partitions, sink.ReplicationFactor, map[string]*string{"cleanup.policy": kadm.StringPtr("delete")})
	}
	if got := int32(len(details[topic].Partitions)); got != partitions {
		return fmt.Errorf("%w: repartition topic %s has %d partitions, state.repartition_partitions (or the input topics' count) is %d: set state.repartition_partitions to %d, or delete both it and the changelog topic (their state is lost)",
			ErrChangelogMismatch, topic, got, partitions, got)
	}
	return nil
}

// EnsureWatermarks checks the watermark topic of source.partitioning
// by_key with watermark.scope global (state.watermark_topic), or creates
// it compacted with one partition when sink.create_topics allows: every
// instance reads all of it from its start, and compaction keeps the
// latest value of each input partition. Another partition count or a
// cleanup.policy without compact is ErrChangelogMismatch.
func EnsureWatermarks(ctx context.Context, adm *kadm.Client, topic string, sink config.Sink) error {
	details, missing, err := describeTopics(ctx, adm, []string{topic})
	if err != nil {
		return fmt.Errorf("check watermark topic: %w", err)
	}
	if len(missing) > 0 {
		if !sink.CreateTopics {
			return fmt.Errorf("%w: watermark topic %s (state.watermark_topic) does not exist and sink.create_topics is false: create it compacted with 1 partition",
				ErrTopicsNotPermitted, topic)
		}
		return createTopic(ctx, adm, topic, 1, sink.ReplicationFactor, ChangelogTopicConfigs())
	}
	if got := len(details[topic].Partitions); got != 1 {
		return fmt.Errorf("%w: watermark topic %s (state.watermark_topic) has %d partitions, it needs 1: delete it (the service creates it again) or name another one",
			ErrChangelogMismatch, topic, got)
	}
	policy, err := cleanupPolicy(ctx, adm, topic)
	if err != nil {
		return fmt.Errorf("check watermark topic: %w", err)
	}
	if !slices.Contains(policy, "compact") {
		return fmt.Errorf("%w: watermark topic %s (state.watermark_topic) has cleanup.policy=%s, which deletes the watermarks a new instance needs: set cleanup.policy=compact",
			ErrChangelogMismatch, topic, strings.Join(policy, ","))
	}
	return nil
}

// ChangelogTopicConfigs are the configs EnsureChangelog gives a changelog
// topic it creates: compacted, as a changelog holds the latest state per key.
func ChangelogTopicConfigs() map[string]*string {
	return map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
}

// cleanupPolicy returns the items of topic's cleanup.policy ("compact",
// "delete"), Kafka's default [delete] when the broker does not list it.
func cleanupPolicy(ctx context.Context, adm *kadm.Client, topic string) ([]string, error) {
	configs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return nil, notPermitted(err)
	}
	rc, err := configs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return nil, notPermitted(fmt.Errorf("describe configs of topic %s: %w", topic, err))
	}
	for _, c := range rc.Configs {
		if c.Key != "cleanup.policy" || c.Value == nil {
			continue
		}
		var policy []string
		for item := range strings.SplitSeq(*c.Value, ",") {
			policy = append(policy, strings.TrimSpace(item))
		}
		return policy, nil
	}
	return []string{"delete"}, nil
}

// EnsureOutputs creates the missing output topics of sink (results, late,
// and dead-letter when set) with sink.partitions and
// sink.replication_factor; the results topic gets cleanup.policy=compact,
// as its Kafka key names (group key, window) and the latest revision is the
// one that matters. Existing topics are left as they are. A topic created
// concurrently by another replica counts as created.
func EnsureOutputs(ctx context.Context, adm *kadm.Client, sink config.Sink) error {
	missing, err := missingTopics(ctx, adm, outputTopics(sink))
	if err != nil {
		return fmt.Errorf("check output topics: %w", err)
	}
	if len(missing) == 0 {
		return nil
	}
	if !sink.CreateTopics {
		return fmt.Errorf("%w: output topics %s do not exist and sink.create_topics is false",
			ErrTopicsNotPermitted, strings.Join(missing, ", "))
	}
	var errs []error
	for _, topic := range missing {
		var configs map[string]*string
		if topic == sink.ResultsTopic {
			configs = ResultsTopicConfigs()
		}
		errs = append(errs, createTopic(ctx, adm, topic, sink.Partitions, sink.ReplicationFactor, configs))
	}
	return errors.Join(errs...)
}

// ResultsTopicConfigs are the configs EnsureOutputs gives a results topic
// it creates.
func ResultsTopicConfigs() map[string]*string {
	return map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
}

func outputTopics(sink config.Sink) []string {
	topics := []string{sink.ResultsTopic, sink.LateTopic}
	if sink.DeadLetterTopic != "" {
		topics = append(topics, sink.DeadLetterTopic)
	}
	return topics
}

// createTopic creates topic; one that another replica created meanwhile
// counts as created.
func createTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32, replicationFactor int16, configs map[string]*string) error {
	resp, err := kadm.AnyE(adm.CreateTopics(ctx, partitions, replicationFactor, configs, topic))
	if err == nil {
		err = resp.Err
	}
	switch {
	case err == nil, errors.Is(err, kerr.TopicAlreadyExists):
		return nil
	case isAuthorization(err):
		return fmt.Errorf("%w: create topic %s: %w", ErrTopicsNotPermitted, topic, err)
	}
	if resp.ErrMessage != "" {
		return fmt.Errorf("create topic %s: %w (%s)", topic, err, resp.ErrMessage)
	}
	return fmt.Errorf("create topic %s: %w", topic, err)
}

// missingTopics returns the topics that do not exist, in the given order.
func missingTopics(ctx context.Context, adm *kadm.Client, topics []string) ([]string, error) {
	_, missing, err := describeTopics(ctx, adm, topics)
	return missing, err
}

// describeTopics returns the details of topics and, in the given order,
// the ones that do not exist. It asks the brokers afresh: kadm otherwise
// answers from kgo's metadata cache, which keeps "unknown topic" for
// seconds after a topic is created. Asking for authorized operations is
// kadm's documented way past the cache.
func describeTopics(ctx context.Context, adm *kadm.Client, topics []string) (kadm.TopicDetails, []string, error) {
	details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), topics...)
	if err != nil {
		return nil, nil, notPermitted(err)
	}
	var missing []string
	for _, topic := range topics {
		d, ok := details[topic]
		switch {
		case !ok, errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			if !slices.Contains(missing, topic) {
				missing = append(missing, topic)
			}
		case d.Err != nil:
			return nil, nil, notPermitted(fmt.Errorf("topic %s: %w", topic, d.Err))
		}
	}
	return details, missing, nil
}

// notPermitted marks authorization failures with ErrTopicsNotPermitted.
func notPermitted(err error) error {
	if isAuthorization(err) {
		return fmt.Errorf("%w: %w", ErrTopicsNotPermitted, err)
	}
	return err
}

func isAuthorization(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed)
}
