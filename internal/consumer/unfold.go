package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/cluster"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
)

// A repartition partition that could not merge a group of partials waits
// until the group's records are read back from their input partition
// (docs/design.md#two-phase-aggregation): at the next poll, before its
// records are applied, unfoldPending reads them, hands them to the core
// and sets the partition's fetch position after the group (the records
// of it polled meanwhile were not applied: they are read again). Its
// fetch is not paused meanwhile: an unfold is rare, and a paused
// partition would stay paused across a revocation.

// unfoldRetrying is unfoldPending, tried again with capped exponential
// backoff while the brokers are out of reach, until ctx ends. c.mu is not
// held.
func (c *Consumer) unfoldRetrying(ctx context.Context) error {
	for n := 0; ; n++ {
		err := c.unfoldPending(ctx)
		if err == nil || ctx.Err() != nil || !cluster.Transient(err) {
			return err
		}
		wait := cluster.Backoff(n)
		c.log.Warn().Err(err).Int("attempt", n+1).Str("retry_in", wait.String()).Msg("reading the records of a group of partials back failed; retrying")
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// unfoldPending reads back the records of the groups the core could not
// merge, hands them to it, and resumes those partitions after their
// groups. Engine goroutine; c.mu is taken only to talk to the core (the
// reads happen without it, as a restore's).
func (c *Consumer) unfoldPending(ctx context.Context) error {
	c.mu.Lock()
	us := c.core.Unfolds()
	c.mu.Unlock()
	if len(us) == 0 {
		return nil
	}
	found, err := c.readBack(ctx, us)
	if err != nil {
		return fmt.Errorf("unfold: %w", err)
	}
	c.mu.Lock()
	var resumes []resume
	now := c.nowMs()
	for i, u := range us {
		p := c.parts.byID[u.Partition]
		if p == nil {
			continue // dropped meanwhile: its next owner reads the group again
		}
		if next := c.core.Unfold(u.Partition, found[i], now, &p.counts); next >= 0 {
			resumes = append(resumes, resume{p: p, position: next, why: resumeUnfolded})
			c.log.Debug().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Str("input_topic", u.Topic).
				Int32("input_partition", u.KafkaPartition).Int("records", len(u.Offsets)).Int("found", len(found[i])).
				Msg("a group of partials could not be merged: its records were read back from the input and applied one by one")
		}
	}
	c.mu.Unlock()
	c.resume(resumes)
	return nil
}

// readBack reads, read_committed, the input records each unfold of us
// names, with a client of its own: found[i] holds those of us[i] the
// input still has, in offset order.
func (c *Consumer) readBack(ctx context.Context, us []pipeline.Unfold) (found [][]ready.Input, err error) {
	type span struct{ from, to int64 }
	spans := map[topicPartition]span{}
	for _, u := range us {
		tp := topicPartition{u.Topic, u.KafkaPartition}
		s, ok := spans[tp]
		lo, hi := u.Offsets[0], u.Offsets[len(u.Offsets)-1]
		if ok {
			lo, hi = min(lo, s.from), max(hi, s.to)
		}
		spans[tp] = span{lo, hi}
	}
	cl, err := kgo.NewClient(append(c.kafka.readOpts[:len(c.kafka.readOpts):len(c.kafka.readOpts)], kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.State.TransactionTimeout+commitTimeout)
	defer cancel()
	topics := map[string]bool{}
	for tp := range spans {
		topics[tp.topic] = true
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, names...) // read_committed: the last stable offsets
	if err != nil {
		return nil, fmt.Errorf("end offsets: %w", err)
	}
	from := map[string]map[int32]kgo.Offset{}
	stop := map[topicPartition]int64{} // read until here (exclusive)
	for tp, s := range spans {
		end := int64(-1)
		if o, ok := ends.Lookup(tp.topic, tp.partition); ok && o.Err == nil {
			end = o.Offset
		}
		if end <= s.from {
			continue // nothing to read there
		}
		if from[tp.topic] == nil {
			from[tp.topic] = map[int32]kgo.Offset{}
		}
		from[tp.topic][tp.partition] = kgo.NewOffset().At(s.from)
		stop[tp] = min(s.to+1, end)
	}
	read := map[topicPartition]map[int64]ready.Input{}
	if len(stop) > 0 {
		cl.AddConsumePartitions(from)
		for len(stop) > 0 {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("read the input: %w", err)
			}
			var ferr error
			fs.EachError(func(t string, p int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) && ferr == nil {
					ferr = fmt.Errorf("read %s[%d]: %w", t, p, err)
				}
			})
			if ferr != nil {
				return nil, ferr
			}
			fs.EachRecord(func(r *kgo.Record) {
				tp := topicPartition{r.Topic, r.Partition}
				end, ok := stop[tp]
				if !ok {
					return
				}
				if r.Offset < end && !r.Attrs.IsControl() {
					if read[tp] == nil {
						read[tp] = map[int64]ready.Input{}
					}
					read[tp][r.Offset] = ready.Input{Topic: r.Topic, KafkaPartition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
						Timestamp: r.Timestamp.UnixMilli()}
				}
				if r.Offset+1 >= end {
					delete(stop, tp) // read to where the group ends (a record past it: the rest was deleted)
				}
			})
			fs.EachPartition(func(p kgo.FetchTopicPartition) {
				tp := topicPartition{p.Topic, p.Partition}
				if end, ok := stop[tp]; ok && p.LogStartOffset >= end {
					delete(stop, tp) // retention deleted all of it
				}
			})
		}
	}
	found = make([][]ready.Input, len(us))
	for i, u := range us {
		got := read[topicPartition{u.Topic, u.KafkaPartition}]
		for _, off := range u.Offsets {
			if in, ok := got[off]; ok {
				found[i] = append(found[i], in)
			}
		}
	}
	return found, nil
}
