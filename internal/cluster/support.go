package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"aggregator/internal/config"
)

// ErrUnsupported is wrapped by the error of a config the cluster cannot
// serve: delivery exactly_once on a cluster without transactions, or a
// sink.compression its brokers cannot take. Retrying cannot fix it: main
// exits 1 with the message, which names the setting that would work.
var ErrUnsupported = errors.New("the cluster cannot do what the config asks")

// txnRequests are the requests of Kafka transactions; a cluster whose
// brokers do not offer all of them has none.
var txnRequests = []kmsg.Key{kmsg.InitProducerID, kmsg.AddPartitionsToTxn, kmsg.AddOffsetsToTxn, kmsg.EndTxn, kmsg.TxnOffsetCommit}

// zstdProduce is the first Produce version that carries zstd batches
// (KIP-110, Kafka 2.1).
const zstdProduce = 7

// CheckSupport asks the brokers whether they can do what cfg asks, with
// requests that write nothing: their ApiVersions (every request of
// transactions with exactly_once; Produce v7 for zstd) and, with
// exactly_once, the transaction coordinator of transactionalID (a cluster
// without transactions, such as Azure Event Hubs' Standard tier, answers
// with an error). What they cannot do is an error that wraps
// ErrUnsupported; brokers that do not answer, an error to retry.
func CheckSupport(ctx context.Context, adm *kadm.Client, cfg config.Config, transactionalID string) error {
	versions, err := adm.ApiVersions(ctx)
	if err != nil {
		return fmt.Errorf("ask the brokers' API versions: %w", err)
	}
	for _, b := range versions.Sorted() {
		if b.Err != nil {
			return fmt.Errorf("ask broker %d's API versions: %w", b.NodeID, b.Err)
		}
		if cfg.ExactlyOnce() {
			var missing []string
			for _, k := range txnRequests {
				if _, ok := b.KeyMaxVersion(k.Int16()); !ok {
					missing = append(missing, k.Name())
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("%w: delivery exactly_once needs Kafka transactions, and broker %d does not offer %s "+
					"(a cluster without transactions: Azure Event Hubs' Standard tier has none); "+
					"set delivery: at_least_once, or use a cluster with transactions", ErrUnsupported, b.NodeID, strings.Join(missing, ", "))
			}
		}
		if produce, _ := b.KeyMaxVersion(kmsg.Produce.Int16()); cfg.Sink.Codec() == config.Zstd && produce < zstdProduce {
			return fmt.Errorf("%w: sink.compression zstd needs Produce v%d (Kafka 2.1), and broker %d takes up to v%d; "+
				"set sink.compression: lz4, gzip, snappy or none", ErrUnsupported, zstdProduce, b.NodeID, produce)
		}
	}
	if !cfg.ExactlyOnce() {
		return nil
	}
	coords := adm.FindTxnCoordinators(ctx, transactionalID).Sorted()
	if len(coords) == 0 {
		return fmt.Errorf("find the transaction coordinator of %s: no answer", transactionalID)
	}
	c := coords[0]
	switch {
	case c.Err == nil:
		return nil
	case kerr.IsRetriable(c.Err) || Transient(c.Err) || errors.Is(c.Err, kerr.TransactionalIDAuthorizationFailed):
		// Not there yet, or an ACL (Permanent says so).
		return fmt.Errorf("find the transaction coordinator of %s: %w", transactionalID, c.Err)
	}
	return fmt.Errorf("%w: delivery exactly_once needs Kafka transactions, and the brokers refuse a transaction coordinator "+
		"for %s: %v %s (a cluster without transactions: Azure Event Hubs' Standard tier has none); "+
		"set delivery: at_least_once, or use a cluster with transactions", ErrUnsupported, transactionalID, c.Err, c.ErrMessage)
}
