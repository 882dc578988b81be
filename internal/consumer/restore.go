package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"aggregator/internal/config"
	"aggregator/internal/metrics"
	"aggregator/internal/pipeline"
	"aggregator/internal/producer"
)

// restorePending restores every assigned partition not restored yet from
// its changelog partition, read to its end (read_committed) before any of
// its input is applied. Engine goroutine; c.mu is not held: the
// changelog's reads happen without it, into a state.Restorer per
// partition (several partitions at once, changelog.go), and it is taken
// only to hand the core the filled Restorers (see the lock order in
// lockorder.go). So a rebalance callback (allowed during an empty poll's
// step) and Close are not held up by a long restore; a partition a
// callback drops meanwhile is left out of it (current), and restored
// anew if assigned again.
func (c *Consumer) restorePending(ctx context.Context) error {
	c.mu.Lock()
	ps := c.toRestore()
	// A partition with a standby copy goes on from the copy, one whose
	// read stalled on an open transaction from where it stopped: only
	// the changelog's tail is read.
	from := map[int32]*partRead{}
	copies := map[*partition]*standbyCopy{}
	for _, p := range ps {
		if b := c.blocked[p.id]; b != nil && b.read != nil {
			from[p.id], b.read = b.read, nil
		} else if cp := c.takeStandby(p.id); cp != nil {
			copies[p] = cp
		}
	}
	c.mu.Unlock()
	for p, cp := range copies { // the copies' reader may be building one: not under c.mu
		if pr := c.claimStandby(p, cp); pr != nil {
			from[p.id] = pr
		}
	}
	if len(ps) == 0 {
		return nil
	}
	began := time.Now()
	var resumes []resume
	var sum restoreSum
	finish := func(pr *partRead) error { // on readChangelog's finishers, several at once
		// The windows are built without c.mu, beside the engine's steps
		// and the other finishers (pipeline.Core.Build); only the attach
		// takes it.
		pr.records = pr.r.Records() - pr.base
		var b *pipeline.Built
		if !pr.p.dropped.Load() {
			b = c.build(pr)
			if pr.warm != nil && errors.Is(b.Err(), pipeline.ErrRebuild) {
				// The copy's windows cannot be finished (the changelog's
				// tail cut over to a new generation): the partition
				// stays unrestored, and the next step restores it from
				// the changelog's start.
				c.log.Info().Str("topic", pr.p.tp.topic).Int32("partition", pr.p.tp.partition).Int32("changelog_partition", pr.p.id).
					Err(b.Err()).Msg("a standby copy cannot be taken over: the partition is restored from the changelog's start")
				return nil
			}
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		r, ok, err := c.finishRestore(ctx, pr, b, &sum)
		if ok {
			resumes = append(resumes, r)
		}
		return err
	}
	cr, stalled, err := c.readChangelog(ctx, ps, from, finish)
	c.mu.Lock()
	if err == nil {
		for _, p := range ps {
			if s, ok := stalled[p.id]; ok && c.current(p) {
				pr := cr.parts[p.id]
				next := goOn(p, pr.r, pr.next, pr.copied)
				next.warm = pr.warm
				c.block(p, s, next)
			}
		}
	}
	took := time.Since(began)
	c.m.RestoreSeconds.Observe(took.Seconds())
	if err == nil && cr.total > 0 {
		c.log.Info().Int("partitions", sum.partitions).Int("partitions_waiting", len(stalled)).Int("changelog_records", sum.records).
			Int("entries", sum.entries).Float64("seconds", took.Seconds()).
			Float64("records_per_second", float64(int64(float64(sum.records)/max(took.Seconds(), 1e-3)))).
			Msg("restore finished")
	}
	c.updateReady()
	c.mu.Unlock()
	c.resume(resumes) // after c.mu: it takes c.fetch.polling
	if err != nil {
		return fmt.Errorf("restore: %w", err) // the next attempt reads from the start again
	}
	return nil
}

// build is the first half of pr's restore (Core.Build): from the copy's
// built state if pr goes on from a standby copy. Off c.mu.
func (c *Consumer) build(pr *partRead) *pipeline.Built {
	if pr.warm != nil {
		return c.core.BuildWarm(pr.warm)
	}
	return c.core.Build(pr.p.id, pr.r)
}

// restoreSum is what one restore restored.
type restoreSum struct{ partitions, records, entries int }

// finishRestore attaches b, pr's partition built from its changelog read
// to its end, to the core (unless a rebalance callback dropped it
// meanwhile: b is dropped), adds it to sum, and returns its input's
// resume if it waited (ok). c.mu is held.
func (c *Consumer) finishRestore(ctx context.Context, pr *partRead, b *pipeline.Built, sum *restoreSum) (r resume, ok bool, err error) {
	p := pr.p
	if !c.current(p) {
		return resume{}, false, nil
	}
	if b == nil { // not built: dropped by a callback while read, which leaves it not current
		return resume{}, false, fmt.Errorf("restore %s[%d]: a current partition was not built", p.tp.topic, p.tp.partition)
	}
	res, err := c.core.Attach(b, c.nowMs())
	if err != nil {
		return resume{}, false, fmt.Errorf("restore %s[%d] from %s[%d]: %w", p.tp.topic, p.tp.partition, c.cfg.State.ChangelogTopic, p.id, err)
	}
	start := int64(-1)
	if res.HasPosition {
		start = res.Position.Offset
	}
	r, ok = c.unblock(p, start)
	records := pr.records // read by this restore
	sum.partitions, sum.records, sum.entries = sum.partitions+1, sum.records+records, sum.entries+res.Entries
	c.m.RestoredRecords.Add(float64(records))
	if pr.copied {
		tail := res.Entries
		if pr.warm != nil {
			tail = pr.warm.Tail()
		}
		c.m.Restores.WithLabelValues("standby").Inc()
		c.m.StandbyEntries.WithLabelValues("takeover").Add(float64(tail))
		c.m.StandbyEntries.WithLabelValues("copy").Add(float64(max(res.Entries-tail, 0)))
		c.log.Info().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Int32("changelog_partition", p.id).
			Int64("changelog_offset", pr.start).Int("changelog_records", records).Int("entries", res.Entries).Int("built_entries", tail).
			Msg("partition taken over from its standby copy: only the changelog's tail was read, and built")
	} else {
		c.m.Restores.WithLabelValues("changelog").Inc()
	}
	rep := c.core.GenerationReport(p.id)
	c.logGenerations(p, rep)
	if err := c.encodeGenerations(ctx, rep.Others); err != nil {
		return r, ok, err
	}
	if res.Stale > 0 || res.Spent > 0 {
		c.log.Warn().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Str("changelog_topic", c.cfg.State.ChangelogTopic).
			Int("stale_records", res.Stale).Int("spent_slices", res.Spent).
			Msg("the changelog holds records an instance wrote after it lost the partition (a zombie: paused past its session); they are left out, the last owner's state is restored and repaired")
	}
	c.log.Debug().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Int64("offset", start).
		Int("changelog_records", records).Int("entries", res.Entries).Int("repairs", len(res.Repairs)).
		Msg("partition restored")
	return r, ok, nil
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
