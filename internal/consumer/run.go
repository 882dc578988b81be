package consumer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
	"aggregator/internal/metrics"
	"aggregator/internal/ready"
)

// Run connects (see connect), then consumes until ctx is canceled and
// returns nil once the poll in hand is applied; it returns an error if an
// output could not be produced (nothing past it is committed), the client
// failed, or connecting met what retrying cannot fix. A fetcher
// goroutine polls and decodes the next poll while this goroutine applies
// the current one.
func (c *Consumer) Run(ctx context.Context) error {
	if c.writer == nil {
		if err := c.connect(ctx); err != nil {
			if ctx.Err() != nil {
				return nil // shut down before the group was joined
			}
			return err
		}
	}
	for {
		err := c.runSession(ctx)
		if !errors.Is(err, errRenew) || ctx.Err() != nil {
			return err
		}
		if err := c.renew(err); err != nil {
			return err
		}
	}
}

// runSession runs the fetcher and applies its polls until ctx is canceled
// or an error; errRenew (exactly_once: the producer fenced) makes Run
// replace the session and go on.
func (c *Consumer) runSession(ctx context.Context) error {
	f := c.fetch
	f.ready = make(chan *poll, pollsInFlight)
	fctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { f.run(fctx) })
	if c.peers != nil {
		wg.Go(func() { c.readPeers(fctx) })
	}
	if c.cfg.State.StandbyReplicas > 0 {
		wg.Go(func() { c.tailStandbys(fctx) })
	}
	err := c.consume(ctx, f)
	stop()
	for p := range f.ready {
		p.decoding.Wait()
		f.free <- p // polled but not applied: not committed either, so read again by the partition's next owner
	}
	wg.Wait()
	c.kafka.cl.AllowRebalance()
	return err
}

// renewable marks err (exactly_once: a fenced producer) as one Run goes
// on from by making the session again.
func (c *Consumer) renewable(err error) error {
	if c.kafka.sess != nil && fenced(err) {
		return fmt.Errorf("%w: %w", errRenew, err)
	}
	return err
}

// consume applies the fetcher's polls in order.
func (c *Consumer) consume(ctx context.Context, f *fetcher) error {
	for p := range f.ready {
		p.decoding.Wait()
		if p.closed || p.unresolved {
			f.free <- p
			return nil
		}
		if err := errors.Join(p.fatal, c.kafka.auth.Err(), c.peers.err()); err != nil {
			f.free <- p
			return c.renewable(err) // p.fatal: a poll's error, or the commit's before a rebalance
		}
		err := c.renewable(c.step(ctx, p))
		c.checkUnfetched(ctx)
		c.checkBlocked(ctx)
		if err == nil {
			err = c.checkSources(ctx)
		}
		c.noteReach()
		c.watchJoin(ctx)
		f.free <- p // never blocks: the channel has room for every poll
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

// fetchErrors logs a poll's errors and returns the first that retrying
// cannot fix (an ACL denies the group or a topic, the brokers refuse the
// credentials), naming the group or topic; kgo retries the others.
func (c *Consumer) fetchErrors(fs kgo.Fetches) error {
	var fatal error
	fs.EachError(func(topic string, partition int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if errors.Is(err, kerr.InvalidSessionTimeout) {
			// The join is refused for good: kgo would retry for ever.
			if fatal == nil {
				fatal = fmt.Errorf("join group %s: %w", c.cfg.Source.Group, c.sessionTimeoutRefused())
			}
			return
		}
		if perm := cluster.Permanent(err); perm != nil {
			if fatal == nil && topic == "" {
				fatal = fmt.Errorf("consume as group %s: %w", c.cfg.Source.Group, perm)
			} else if fatal == nil {
				fatal = fmt.Errorf("consume %s[%d] as group %s: %w", topic, partition, c.cfg.Source.Group, perm)
			}
			return
		}
		c.log.Warn().Err(err).Str("topic", topic).Int32("partition", partition).Msg("fetch")
	})
	return fatal
}

// sessionTimeoutRefused is the config error of a session timeout the
// brokers refuse, with their bounds if they say them.
func (c *Consumer) sessionTimeoutRefused() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var lo, hi time.Duration
	adm := kadm.NewClient(c.kafka.cl)
	if brokers, err := adm.ListBrokers(ctx); err == nil && len(brokers) > 0 {
		if rcs, err := adm.DescribeBrokerConfigs(ctx, brokers[0].NodeID); err == nil && len(rcs) > 0 {
			for _, cf := range rcs[0].Configs {
				ms, err := strconv.ParseInt(cf.MaybeValue(), 10, 64)
				if err != nil {
					continue
				}
				switch cf.Key {
				case "group.min.session.timeout.ms":
					lo = time.Duration(ms) * time.Millisecond
				case "group.max.session.timeout.ms":
					hi = time.Duration(ms) * time.Millisecond
				}
			}
		}
	}
	return config.SessionTimeoutRefused(c.cfg.Source.SessionTimeout, lo, hi)
}

// step restores newly assigned partitions, applies one poll's records,
// ticks the watermark, updates the metrics and commits when due.
func (c *Consumer) step(ctx context.Context, p *poll) error {
	if c.kafka.sess != nil && c.restoreWaits() {
		// A restore can take long: the open transaction is committed
		// first, so that the broker does not abort it meanwhile.
		if err := c.commitNow(ctx); err != nil {
			return err
		}
	}
	due, err := c.process(ctx, p)
	if err != nil || !due {
		return err
	}
	return c.commitNow(ctx)
}

// commitNow commits; a commit under way finishes even if shutdown begins
// meanwhile. A commit the brokers are out of reach for is tried again
// later (the client keeps what it has not written).
func (c *Consumer) commitNow(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	err := c.lockedCommit(cctx)
	if err != nil && cluster.Transient(err) {
		c.log.Warn().Err(err).Msg("commit failed: the brokers cannot be reached; trying again")
		return nil
	}
	return err
}

// restoreWaits reports whether an assigned partition waits for its
// restore (not one that waits on an open transaction in its changelog).
func (c *Consumer) restoreWaits() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.toRestore()) > 0
}

// process applies the poll and reports whether a commit is due.
func (c *Consumer) process(ctx context.Context, p *poll) (bool, error) {
	c.mu.Lock()
	c.dropRevoked()
	c.mu.Unlock()
	if c.cfg.State.StandbyReplicas > 0 {
		c.reconcileStandbys()
		c.probeWarmUps()
	}
	// Without c.mu: the changelog reads, and the input's for an unfold,
	// do not hold it.
	if err := c.restoreRetrying(ctx); err != nil {
		if ctx.Err() != nil {
			return false, nil // shutting down: the next owner restores it
		}
		if errors.Is(err, config.ErrInvalid) {
			c.mu.Lock()
			c.cycle.refused = true
			c.mu.Unlock()
		}
		return false, err
	}
	if err := c.unfoldRetrying(ctx); err != nil {
		if ctx.Err() != nil {
			return false, nil // shutting down: the partition's next owner reads the group again
		}
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writer.SetFetched(p.fetchedAt)
	c.applyPeers()
	if p.epoch == c.fetch.epoch.Load() {
		c.apply(p)
	}
	now := c.nowMs()
	c.core.Tick(now)
	rd := c.core.Step(now)
	c.write(rd.Outputs)
	c.writer.Send() // the poll's outputs, encoded and produced by the writer goroutine meanwhile
	c.updateMetrics(now, &rd.Stats)
	if err := c.writer.Err(); err != nil {
		if c.writer.OnlyRefused() || c.kafka.sess != nil && cluster.Transient(err) {
			// Commit now: the stubs replace what was refused; with
			// exactly_once, the transaction aborts and the records are
			// processed again (see commitTransaction).
			return true, nil
		}
		return false, err
	}
	return ctx.Err() == nil && time.Since(c.cycle.lastCommit) >= c.cfg.State.CommitInterval, nil
}

// restoreRetrying is restorePending, tried again with capped exponential
// backoff while the brokers are out of reach, until ctx ends: the poll's
// records must wait for their partitions' state. c.mu is not held.
func (c *Consumer) restoreRetrying(ctx context.Context) error {
	for n := 0; ; n++ {
		err := c.restorePending(ctx)
		if err == nil || ctx.Err() != nil || !cluster.Transient(err) {
			return err
		}
		wait := cluster.Backoff(n)
		c.log.Warn().Err(err).Int("attempt", n+1).Str("retry_in", wait.String()).Msg("restore failed; retrying")
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// apply runs the poll's records through the core, partition by
// partition in offset order (the core skips what is in its state
// already: at_least_once, records fetched again after a restore).
func (c *Consumer) apply(pl *poll) {
	now := c.nowMs()
	for _, pp := range pl.parts {
		p := c.parts.byTP[pp.tp]
		if p == nil || pl.rewinds < p.rewound {
			continue
		}
		if c.blocked != nil && c.blocked[p.id] != nil {
			// Its restore waits on an open transaction: not applied,
			// read again once it is restored (unblock).
			if p.firstDropped < 0 && len(pp.records) > 0 {
				p.firstDropped = pp.records[0].Offset
			}
			continue
		}
		c.core.Apply(p.id, pl.recs[pp.lo:pp.hi], pp.hwm, now, &p.counts)
	}
}

func (c *Consumer) nowMs() int64 { return c.clock().UnixMilli() }

// updateMetrics adds the outcome counts and the stats' counts since the
// last Ready, and sets the gauges. c.mu is held.
func (c *Consumer) updateMetrics(now int64, st *ready.Stats) {
	c.m.Watermark.Set(metrics.Seconds(st.Watermark))
	if st.Watermark > math.MinInt64 {
		c.m.WatermarkLag.Set(float64(now-st.Watermark) / 1000)
	}
	c.m.OpenWindows.Set(float64(st.OpenWindows))
	c.m.Generations.Set(float64(st.Generations))
	c.countStats(st)
	if st.LogConflict {
		c.logConflict(st.Conflict)
	}
	c.m.IdlePartitions.Set(float64(st.IdlePartitions))
	for _, ps := range st.Partitions {
		if p := c.parts.byID[ps.ID]; p != nil {
			p.wm.Set(metrics.Seconds(ps.Watermark))
			if ps.LagKnown {
				p.lag.Set(float64(ps.Lag))
			}
		}
	}
	if st.HasSources {
		// What the instance knows of the source partitions: each one's
		// watermark, which one holds W, and how many have not reported.
		for i, src := range st.Sources {
			if src.Reported {
				c.m.SourceWatermark.WithLabelValues(strconv.Itoa(i)).Set(metrics.Seconds(src.Watermark))
			}
		}
		c.m.SourcesUnreported.Set(float64(st.Unreported))
		c.m.WatermarkSource.Set(float64(st.Holder))
	}
}

// checkUnfetched tells the core which partitions that
// have not returned a record since their assignment are at their log
// end: an empty partition must be able to go idle too.
func (c *Consumer) checkUnfetched(ctx context.Context) {
	if c.cfg.Watermark.IdleTimeout <= 0 || time.Since(c.cycle.unfetched) < 10*tickInterval {
		return
	}
	c.cycle.unfetched = time.Now()
	c.mu.Lock()
	unfetched := c.unfetched()
	topics := map[string]bool{}
	for p := range unfetched {
		topics[p.tp.topic] = true
	}
	c.mu.Unlock()
	if len(topics) == 0 {
		return
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	adm := kadm.NewClient(c.kafka.cl)
	starts, err := adm.ListStartOffsets(lctx, names...)
	if err != nil {
		return // tried again at the next check
	}
	ends, err := adm.ListEndOffsets(lctx, names...)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.nowMs()
	still := c.unfetched() // the pipeline moved on meanwhile (a fetch, an abort, a rebalance)
	for p, pos := range unfetched {
		if cur, ok := still[p]; !ok || cur != pos {
			continue
		}
		end, ok1 := ends.Lookup(p.tp.topic, p.tp.partition)
		start, ok2 := starts.Lookup(p.tp.topic, p.tp.partition)
		if !ok1 || !ok2 || end.Err != nil || start.Err != nil {
			continue
		}
		if pos < 0 && c.cfg.Source.StartAtLatest() && p.tp.topic != c.cfg.State.RepartitionTopic {
			pos = end.Offset
		} else if pos < 0 {
			pos = start.Offset
		}
		c.core.SetCaughtUp(p.id, pos >= end.Offset, now)
	}
}

// unfetched are the partitions no fetch has returned a record of since
// their assignment, with their positions. c.mu is held.
func (c *Consumer) unfetched() map[*partition]int64 {
	out := map[*partition]int64{}
	for id, pos := range c.core.Unfetched() {
		if p := c.parts.byID[id]; p != nil {
			out[p] = pos
		}
	}
	return out
}

// logConflict says which group key broke by_key's promise, and where: the
// core hands out at most one a minute.
func (c *Consumer) logConflict(k ready.Conflict) {
	ev := c.log.Warn().Str("key", k.Key)
	for _, f := range []struct {
		name string
		id   int32
	}{{"first", k.First}, {"second", k.Second}} {
		if p, ok := c.parts.byID[f.id]; ok {
			ev = ev.Str(f.name+"_topic", p.tp.topic).Int32(f.name+"_partition", p.tp.partition)
		}
	}
	ev.Msg("a group key is on two input partitions: its windows are computed per partition, each publishing partial results (source.partitioning by_key expects the producer to put every record of a key in one partition)")
}
