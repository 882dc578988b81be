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

// ErrTopicsMissing is wrapped by the error of VerifyInputs when input
// topics do not exist; the error names every one of them.
var ErrTopicsMissing = errors.New("topics missing")

// VerifyInputs checks that every input topic exists, naming all the missing
// ones in one error rather than failing on the first.
func VerifyInputs(ctx context.Context, adm *kadm.Client, topics []string) error {
	missing, err := missingTopics(ctx, adm, topics)
	if err != nil {
		return fmt.Errorf("check input topics: %w", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("source.topics: %w: %s", ErrTopicsMissing, strings.Join(missing, ", "))
	}
	return nil
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
		errs = append(errs, createTopic(ctx, adm, sink, topic))
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

func createTopic(ctx context.Context, adm *kadm.Client, sink config.Sink, topic string) error {
	var configs map[string]*string
	if topic == sink.ResultsTopic {
		configs = ResultsTopicConfigs()
	}
	resp, err := kadm.AnyE(adm.CreateTopics(ctx, sink.Partitions, sink.ReplicationFactor, configs, topic))
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
// It asks the brokers afresh: kadm otherwise answers from kgo's metadata
// cache, which keeps "unknown topic" for seconds after a topic is created.
// Asking for authorized operations is kadm's documented way past the cache.
func missingTopics(ctx context.Context, adm *kadm.Client, topics []string) ([]string, error) {
	details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), topics...)
	if err != nil {
		return nil, notPermitted(err)
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
			return nil, notPermitted(fmt.Errorf("topic %s: %w", topic, d.Err))
		}
	}
	return missing, nil
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
