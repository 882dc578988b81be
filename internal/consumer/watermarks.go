package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/cluster"
	"aggregator/internal/invariants"
	"aggregator/internal/watermark"
)

// peerReader reads the watermark topic of source.partitioning by_key with
// watermark.scope global: every instance's published partition
// watermarks, its own included, kept for the engine goroutine (which
// hands them to the core: applyPeers). Safe for concurrent use.
type peerReader struct {
	topic string

	mu invariants.Mutex // guards what follows
	// pending is the latest value read of each partition since the
	// engine goroutine last took them: only the latest counts, so a
	// backlog (a long topic read at start) is one value per partition.
	pending map[topicPartition]peerValue
	fatal   error // a fetch error that retrying cannot fix
}

// peerValue is one published value: an input partition, its watermark
// and idleness.
type peerValue struct {
	tp   topicPartition
	wm   int64
	idle bool
}

// take returns the latest value of each partition read since the last
// call (nil if none) and forgets them.
func (r *peerReader) take() map[topicPartition]peerValue {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.pending
	r.pending = nil
	return q
}

// err is the fetch error that ends the service, if any.
func (r *peerReader) err() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal
}

// readPeers reads the whole watermark topic from its start until ctx
// ends, with a client of its own (no group, read_committed: a value is
// seen once the commit that wrote it is).
func (c *Consumer) readPeers(ctx context.Context) {
	r := c.peers
	opts := append(c.kafka.readOpts[:len(c.kafka.readOpts):len(c.kafka.readOpts)],
		kgo.WithLogger(cluster.NewLogger(c.kafka.root, "kafka_watermarks")),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.topic: {0: kgo.NewOffset().AtStart()}}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		r.mu.Lock()
		r.fatal = fmt.Errorf("watermark topic %s: kafka client: %w", r.topic, err)
		r.mu.Unlock()
		return
	}
	defer cl.Close()
	layout := c.core.Layout() // made before Run started this goroutine; it does not change
	var lastWarn time.Time
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			if perm := cluster.Permanent(err); perm != nil {
				r.mu.Lock()
				if r.fatal == nil {
					r.fatal = fmt.Errorf("read watermark topic %s: %w", topic, perm)
				}
				r.mu.Unlock()
				return
			}
			if time.Since(lastWarn) >= time.Minute {
				lastWarn = time.Now()
				c.log.Warn().Err(err).Str("topic", topic).Int32("partition", partition).Msg("read the watermark topic; the client keeps retrying (the other instances' partitions hold the watermark where it is meanwhile)")
			}
		})
		var vals []peerValue
		fs.EachRecord(func(rec *kgo.Record) {
			topic, n, wm, idle, err := watermark.ParsePublished(rec.Key, rec.Value)
			if _, ok := layout.Source(topic, n); err != nil || !ok {
				// Another release's, or an input topic's partition this
				// instance does not know (the topics changed): skipped.
				c.log.Debug().Err(err).Str("topic", rec.Topic).Int64("offset", rec.Offset).Bytes("key", rec.Key).Msg("skip a record of the watermark topic")
				return
			}
			vals = append(vals, peerValue{tp: topicPartition{topic, n}, wm: wm, idle: idle})
		})
		if len(vals) > 0 {
			r.mu.Lock()
			if r.pending == nil {
				r.pending = map[topicPartition]peerValue{}
			}
			for _, v := range vals { // in offset order: the latest stays
				r.pending[v.tp] = v
			}
			r.mu.Unlock()
		}
	}
}

// applyPeers hands the published values read since the last call to the
// core. c.mu is held.
func (c *Consumer) applyPeers() {
	if c.peers == nil {
		return
	}
	for _, v := range c.peers.take() {
		c.core.Peer(v.tp.topic, v.tp.partition, v.wm, v.idle)
	}
}

// publish produces the watermark topic's records of a commit Ready's
// Watermarks (in the commit's transaction with exactly_once). c.mu is held.
func (c *Consumer) publish(ctx context.Context, marks []watermark.Mark) {
	if len(marks) == 0 || c.peers == nil {
		return
	}
	recs := make([]kgo.Record, 0, len(marks))
	for _, m := range marks {
		topic, n, ok := c.core.Layout().SourcePartition(m.Source)
		if !ok {
			continue
		}
		recs = append(recs, kgo.Record{Topic: c.peers.topic, Partition: 0,
			Key: watermark.AppendPublishedKey(nil, topic, n), Value: watermark.AppendPublished(nil, m.Watermark, m.Idle)})
	}
	c.writer.Publish(ctx, recs)
}
