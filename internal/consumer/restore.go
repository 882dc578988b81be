package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/metrics"
	"aggregator/internal/pipeline"
	"aggregator/internal/producer"
)

// restorePending restores every assigned partition not restored yet from
// its changelog partition, read to its end (read_committed) before any of
// its input is applied. Engine goroutine; c.mu is not held: the
// changelog's reads happen without it, and it is taken only to hand the
// core what they read (see the lock order in lockorder.go). So a
// rebalance callback (allowed during an empty poll's step) and Close are
// not held up by a long restore; a partition a callback drops meanwhile
// is left out of it (current), and restored anew if assigned again.
func (c *Consumer) restorePending(ctx context.Context) error {
	c.mu.Lock()
	ps := c.toRestore()
	for _, p := range ps {
		c.core.BeginRestore(p.id)
	}
	c.mu.Unlock()
	if len(ps) == 0 {
		return nil
	}
	began := time.Now()
	stalled, err := c.readChangelog(ctx, ps)
	if err != nil {
		return fmt.Errorf("restore: %w", err) // the next attempt reads from the start again (BeginRestore)
	}
	c.mu.Lock()
	resumes, err := c.finishRestore(ctx, ps, stalled, began)
	c.mu.Unlock()
	c.resume(resumes) // after c.mu: it takes c.fetch.polling
	return err
}

// finishRestore ends the restore of ps, read to their ends but for
// stalled (the read began at began), and returns the partitions whose
// input resumes from their restored position. c.mu is held.
func (c *Consumer) finishRestore(ctx context.Context, ps []*partition, stalled map[int32]stall, began time.Time) ([]resume, error) {
	var resumes []resume
	now := c.nowMs()
	for _, p := range ps {
		if !c.current(p) {
			continue
		}
		if s, ok := stalled[p.id]; ok {
			c.block(p, s)
			continue
		}
		res, records, err := c.core.FinishRestore(p.id, now)
		if err != nil {
			return resumes, fmt.Errorf("restore %s[%d] from %s[%d]: %w", p.tp.topic, p.tp.partition, c.cfg.State.ChangelogTopic, p.id, err)
		}
		start := int64(-1)
		if res.HasPosition {
			start = res.Position.Offset
		}
		if r, ok := c.unblock(p, start); ok {
			resumes = append(resumes, r)
		}
		c.m.RestoredRecords.Add(float64(records))
		rep := c.core.GenerationReport(p.id)
		c.logGenerations(p, rep)
		if err := c.encodeGenerations(ctx, rep.Others); err != nil {
			return resumes, err
		}
		if res.Stale > 0 || res.Spent > 0 {
			c.log.Warn().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Str("changelog_topic", c.cfg.State.ChangelogTopic).
				Int("stale_records", res.Stale).Int("spent_slices", res.Spent).
				Msg("the changelog holds records an instance wrote after it lost the partition (a zombie: paused past its session); they are left out, the last owner's state is restored and repaired")
		}
		c.log.Debug().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Int64("offset", start).
			Int("changelog_records", records).Int("entries", res.Entries).Int("repairs", len(res.Repairs)).
			Msg("partition restored")
	}
	c.m.RestoreSeconds.Observe(time.Since(began).Seconds())
	c.updateReady()
	return resumes, nil
}

// current reports whether p is still assigned: not dropped by a
// rebalance callback since it was looked up (a partition assigned again
// is another *partition). c.mu is held.
func (c *Consumer) current(p *partition) bool { return c.parts.byID[p.id] == p }

// toRestore are the assigned partitions to restore now: not restored,
// and not waiting on an open transaction in their changelog partition
// (unless its last stable offset moved since). c.mu is held.
func (c *Consumer) toRestore() []*partition {
	var ps []*partition
	for _, id := range c.core.Unrestored() {
		if b := c.blocked[id]; b == nil || b.retry {
			ps = append(ps, c.parts.byID[id])
		}
	}
	return ps
}

// readChangelog reads the changelog partitions of ps from their start to
// their end into the pipeline, with a client of its own. When the read
// has seen nothing new for restoreStall and every partition not at its
// end has its last stable offset at its read position (an open
// transaction holds them back), it returns those partitions: stalled.
//
// It is called without c.mu, which it takes for each fetch's records
// only: a slow read holds up no one else that takes c.mu.
func (c *Consumer) readChangelog(ctx context.Context, ps []*partition) (stalled map[int32]stall, err error) {
	topic := c.cfg.State.ChangelogTopic
	cl, err := kgo.NewClient(append(c.kafka.readOpts[:len(c.kafka.readOpts):len(c.kafka.readOpts)], kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.State.TransactionTimeout+commitTimeout)
	defer cancel()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	next := map[int32]int64{} // changelog partition → next offset to read, for those not at their end
	end := map[int32]int64{}
	byID := map[int32]*partition{}
	for _, p := range ps {
		byID[p.id] = p
		o, ok := ends.Lookup(topic, p.id)
		if !ok || o.Err != nil {
			return nil, fmt.Errorf("end offset of %s[%d]: %v", topic, p.id, o.Err)
		}
		if o.Offset > 0 {
			next[p.id], end[p.id] = 0, o.Offset
		}
	}
	if len(next) == 0 {
		return nil, nil
	}
	from := map[int32]kgo.Offset{}
	for id := range next {
		from[id] = kgo.NewOffset().AtStart()
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})
	moved := time.Now() // the last record read
	for len(next) > 0 {
		pctx, pcancel := context.WithTimeout(ctx, restoreStall/4)
		fs := cl.PollFetches(pctx)
		pcancel()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) { // the poll's own deadline
				ferr = fmt.Errorf("read %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		var aerr error
		c.mu.Lock()
		for id := range next {
			if !c.current(byID[id]) {
				delete(next, id) // dropped meanwhile: its records are not read
			}
		}
		fs.EachRecord(func(r *kgo.Record) {
			if _, ok := next[r.Partition]; !ok || aerr != nil {
				return
			}
			next[r.Partition] = r.Offset + 1
			moved = time.Now()
			if r.Attrs.IsControl() {
				return
			}
			var tag []byte
			for _, h := range r.Headers {
				if h.Key == pipeline.TagHeader {
					tag = h.Value
				}
			}
			if err := c.core.RestoreRecord(r.Partition, r.Key, r.Value, tag); err != nil {
				aerr = fmt.Errorf("%s[%d] offset %d: %w", topic, r.Partition, r.Offset, err)
			}
		})
		c.mu.Unlock()
		if aerr != nil {
			return nil, aerr
		}
		for id, n := range next {
			if n >= end[id] {
				delete(next, id)
			}
		}
		if len(next) == 0 || time.Since(moved) < restoreStall {
			continue
		}
		// Nothing new for restoreStall: the partitions left may wait on
		// open transactions (read_committed reads up to the last stable
		// offset). If every one does, the others are restored and these
		// wait, paused (see blockedRestore).
		moved = time.Now()
		lsos, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			continue
		}
		stalled = map[int32]stall{}
		for id, n := range next {
			if o, ok := lsos.Lookup(topic, id); ok && o.Err == nil && o.Offset <= n {
				stalled[id] = stall{lso: o.Offset, end: end[id]}
			}
		}
		if len(stalled) == len(next) {
			return stalled, nil
		}
	}
	return nil, nil
}

// logGenerations says what p's restore decided about its config
// generations (docs/changing-config.md#what-a-cut-over-logs): a cut-over at info (and its metric), a
// partition that keeps its newer stored generation at warn. c.mu is held.
func (c *Consumer) logGenerations(p *partition, rep pipeline.GenerationReport) {
	changes := make([]string, len(rep.Changes))
	for i, ch := range rep.Changes {
		changes[i] = ch.String()
	}
	if rep.Cutover != 0 {
		c.m.CutoverTimestamp.WithLabelValues(strconv.Itoa(int(p.id))).Set(metrics.Seconds(rep.Cutover))
	}
	switch rep.Verdict {
	case config.NewGeneration:
		if rep.PastCutover {
			c.log.Warn().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Int32("changelog_partition", p.id).
				Str("state_cutover", c.cfg.State.Cutover).Str("cutover", time.UnixMilli(rep.Cutover).UTC().Format(time.RFC3339Nano)).
				Msg("the partition's state has seen event times at or after state.cutover: it cuts over at its own T, later than all of them")
		}
		c.log.Info().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Int32("changelog_partition", p.id).
			Int64("old_version", rep.Stored).Int64("new_version", rep.Running).
			Str("cutover", time.UnixMilli(rep.Cutover).UTC().Format(time.RFC3339Nano)).Int64("cutover_ms", rep.Cutover).
			Strs("changes", changes).Int("live_generations", rep.Live).
			Msg("cut over to a new generation of windows: the old one finishes its windows that start before the cut-over, the new one makes those from it on")
	case config.Older:
		c.log.Warn().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Int32("changelog_partition", p.id).
			Int64("config_version", c.cfg.State.ConfigVersion).Int64("stored_version", rep.Stored).Strs("changes", changes).
			Msg("state.config_version is lower than the partition's newest stored generation (a pod of an older release during a rollout): the partition runs its stored generation, never an older one")
	}
}

// encodeGenerations gives the writer the result encoders of the live
// generations whose aggregates are not the config's, before any of their
// results reach it: JSON names, or with sink.format avro their own schema,
// registered under the results' subject (the registry gives it the
// subject's next version). c.mu is held: a registry request, rare (a
// restore that finds such a generation), waits on no rebalance callback.
func (c *Consumer) encodeGenerations(ctx context.Context, gens []pipeline.GenerationConfig) error {
	for _, g := range gens {
		if c.encoded[g.Version] {
			continue
		}
		var enc producer.ResultEncoder = producer.EncoderFor(g.Config)
		if c.cfg.Sink.Format == config.FormatAvro {
			subject := c.cfg.Sink.ResultsTopic + "-value"
			id, err := c.schemas.registry.Register(ctx, subject, producer.AvroSchema(g.Config))
			if err != nil {
				return fmt.Errorf("register the Avro schema of generation %d: %w", g.Version, err)
			}
			enc = producer.NewAvroEncoder(g.Config, id)
			c.log.Info().Str("subject", subject).Uint32("schema_id", id).Int64("config_version", g.Version).
				Msg("the results of an older generation of windows are Avro of its own schema")
		}
		c.writer.Generation(g.Version, enc)
		if c.encoded == nil {
			c.encoded = map[int64]bool{}
		}
		c.encoded[g.Version] = true
	}
	return nil
}
