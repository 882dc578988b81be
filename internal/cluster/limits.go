package cluster

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
)

// DefaultMaxMessageBytes is Kafka's default max.message.bytes, for a topic
// whose config does not say.
const DefaultMaxMessageBytes = 1048588

// MaxMessageBytes returns each topic's max.message.bytes: the largest
// record batch its brokers take, so the largest record the service can
// write there.
func MaxMessageBytes(ctx context.Context, adm *kadm.Client, topics ...string) (map[string]int32, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("read max.message.bytes: %w", notPermitted(err))
	}
	limits := make(map[string]int32, len(topics))
	for _, topic := range topics {
		limits[topic] = DefaultMaxMessageBytes
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			return nil, fmt.Errorf("read max.message.bytes of %s: %w", rc.Name, notPermitted(rc.Err))
		}
		for _, c := range rc.Configs {
			if c.Key != "max.message.bytes" {
				continue
			}
			n, err := strconv.ParseInt(c.MaybeValue(), 10, 32)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("topic %s has max.message.bytes=%q, not a positive number", rc.Name, c.MaybeValue())
			}
			limits[rc.Name] = int32(n)
		}
	}
	return limits, nil
}
