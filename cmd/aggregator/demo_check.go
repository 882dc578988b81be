package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	demopkg "aggregator/internal/demo"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/recompute"
	"aggregator/internal/registry"
	"aggregator/internal/windowing"
)

// demoCheckNote says why the demo runs no check against a replay of this
// config, or "" when it does: global windows never close, and a count
// window's timeout fires by the watermark, so when it fires (and with
// what) depends on how the instances' partitions interleave.
func demoCheckNote(f demoFlags) string {
	if f.changeAt > 0 {
		return "none with --change-at (the reference run has one config; each window is its own generation's config's)"
	}
	switch f.window {
	case "global":
		return "none for global windows (they never close)"
	case "count":
		return "none for count windows (a timeout firing depends on the order partitions are read in)"
	}
	return ""
}

// runReference is the reference run (a replay in one process) the demo
// compares the service's results with: replay --kcat's engine (one state
// per group key across the partitions, the watermark the minimum over
// all of them) over the input topic as it grows, read by a plain
// consumer of every partition.
// It processes the records in the order the generator produced them
// (demopkg.SeqHeader), holding back those that come early: what one
// instance that kept up would have read, however far behind this reader
// falls. It hands every result it computes, encoded as the service
// encodes it, to check, until ctx is done.
func runReference(ctx context.Context, cfg config.Config, log zerolog.Logger, check *demopkg.Check) error {
	topic := cfg.Source.Topics[0]
	cl, err := newDemoClient(cfg, log, "kafka_demo_reference",
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err == nil {
		err = topics.Error()
	}
	if err != nil {
		return ignoreCanceled(ctx, fmt.Errorf("reference run: list %s: %w", topic, err))
	}
	var reg *registry.Client
	if cfg.UsesRegistry() {
		if reg, err = registry.New(cfg.Source.SchemaRegistry, log, prometheus.NewRegistry()); err != nil {
			return err
		}
	}
	// Every partition from the start, as replay --kcat assigns a dump's.
	// The schemas are fetched here a fetch at a time: the engine gets no
	// registry.
	eng, err := recompute.New(cfg, nil, topics[topic].Partitions.Numbers())
	if err != nil {
		return err
	}
	enc := producer.EncoderFor(cfg)
	var key, value []byte
	emit := func(rd *ready.Ready) error {
		for i := range rd.Outputs {
			out := &rd.Outputs[i]
			if out.Kind != ready.Result {
				continue
			}
			key = enc.AppendKey(key[:0], &out.Result)
			v := []byte(nil) // a retraction's tombstone
			if out.Result.Firing != windowing.Retract {
				value = enc.AppendResult(value[:0], &out.Result)
				v = value
			}
			if err := check.Observe(demopkg.Reference, key, v); err != nil {
				return err
			}
		}
		return nil
	}
	var next int64                   // the sequence number to process next
	early := map[int64]*kgo.Record{} // read before next
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		// Fetch errors are retried inside the client, as Watch's are.
		recs := fetches.Records()
		if reg != nil {
			values := func(yield func([]byte) bool) {
				for _, r := range recs {
					if !yield(r.Value) {
						return
					}
				}
			}
			if err := reg.Resolve(ctx, eng.Schemas(), values); err != nil {
				return ignoreCanceled(ctx, err)
			}
		}
		for _, r := range recs {
			seq, ok := demopkg.Seq(r)
			if !ok {
				continue // not the generator's: the check is off for an input topic used before
			}
			early[seq] = r
		}
		for r := early[next]; r != nil; r = early[next] {
			delete(early, next)
			next++
			in := ready.Input{Topic: r.Topic, Partition: r.Partition, KafkaPartition: r.Partition, Offset: r.Offset,
				Key: r.Key, Value: r.Value, Timestamp: r.Timestamp.UnixMilli()}
			rd, err := eng.Process(ctx, &in)
			if err != nil {
				return err
			}
			if len(rd.Outputs) > 0 {
				if err := emit(&rd); err != nil {
					return err
				}
			}
		}
	}
}

// ignoreCanceled is nil when err comes of ctx ending, else err.
func ignoreCanceled(ctx context.Context, err error) error {
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return nil
	}
	return err
}
