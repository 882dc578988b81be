package consumer

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/invariants"
	"aggregator/internal/pipeline"
	"aggregator/internal/placement"
	"aggregator/internal/state"
)

const (
	// standbyPoll bounds a standby fetch's wait for new records.
	standbyPoll = 250 * time.Millisecond
	// standbyList is how often the changelog's last stable offsets are
	// listed, so that a copy with nothing new to fetch knows it holds
	// everything (a fetch with no records says nothing).
	standbyList = time.Second
	// probeEvery bounds how often the instance asks for a rebalance
	// because a warm-up copy caught up; probeAgain is how long a warm-up
	// that a rebalance it asked for left a warm-up (it was behind again
	// at the join) waits before it asks again.
	probeEvery = time.Second
	probeAgain = 5 * time.Second
)

// standbys are the instance's standby copies (state.standby_replicas,
// docs/design.md "Standby state"): the copies the group's last plan
// gives it, each a state.Standby that a reader goroutine (tailStandbys)
// fills from its changelog partition, read_committed, and never writes.
// A copy of a partition the plan makes the instance's own is kept until
// the partition's restore takes it (take) and reads only the tail. The
// progress of each copy is its state.Standby's; this holds them and the
// reader's queue of partitions to start and stop. Safe for concurrent
// use: the engine goroutine reconciles and takes, the reader adds
// records, kgo's goroutines read the lags for a join.
type standbys struct {
	mu     invariants.Mutex // a leaf
	copies map[int32]*standbyCopy
	start  map[int32]bool // partitions the reader must start reading, from their start
	stop   []int32        // partitions it must stop reading
	gen    uint64         // the balancer's sync the copies follow
	asked  time.Time      // the last rebalance asked for (engine goroutine)
	wake   chan struct{}  // size 1: the reader has partitions to start
}

// standbyCopy is one copy: its partition and progress, its built state,
// and whether it warms up for a partition that moves here once it is
// caught up.
type standbyCopy struct {
	tp placement.Partition
	s  *state.Standby // its progress, under standbys.mu; its records go into w.Restorer()
	// build guards w (and s's Restorer): the reader holds it to add a
	// fetch's records and build them (Core.Drain, off Consumer.mu and
	// standbys.mu), a takeover to take the copy (taken).
	build invariants.Mutex
	w     *pipeline.Warm
	taken bool
	warm  bool
	// asked: a rebalance was asked for once it caught up, and not again
	// before askAgain.
	asked    bool
	askAgain time.Time
	// reading: the reader has started reading its partition for it;
	// records fetched before (for a copy dropped and started again) are
	// not its.
	reading bool
}

func newStandbys() *standbys {
	return &standbys{copies: map[int32]*standbyCopy{}, start: map[int32]bool{}, wake: make(chan struct{}, 1)}
}

// reconcileStandbys makes the copies the ones the group's last plan
// gives the instance: new ones start empty and read their changelog
// partition from its start, dropped ones stop; a copy of a partition the
// plan makes the instance's own stays for its restore. Engine goroutine.
func (c *Consumer) reconcileStandbys() {
	a, gen := c.balancer.Assignment()
	sb := c.standby
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if gen == sb.gen {
		return
	}
	sb.gen = gen
	l := c.core.Layout()
	want := map[int32]placement.Copy{}
	for _, cp := range a.Copies {
		want[l.ID(cp.Topic, cp.Partition.Partition)] = cp
	}
	own := map[int32]bool{}
	for _, p := range a.Active {
		own[l.ID(p.Topic, p.Partition)] = true
	}
	for id := range sb.copies {
		if _, ok := want[id]; !ok && !own[id] {
			sb.drop(id)
			c.m.StandbyLagRecords.DeleteLabelValues(strconv.Itoa(int(id)))
			c.m.StandbyLagSeconds.DeleteLabelValues(strconv.Itoa(int(id)))
		}
	}
	now := c.nowMs()
	for id, cp := range want {
		if have := sb.copies[id]; have != nil {
			if have.asked && cp.WarmUp {
				have.asked, have.askAgain = false, time.Now().Add(probeAgain)
			}
			have.warm = cp.WarmUp
			continue
		}
		sb.copies[id] = c.newCopy(id, cp.Partition, now)
		sb.copies[id].warm = cp.WarmUp
		sb.start[id] = true
		c.log.Debug().Str("topic", cp.Topic).Int32("partition", cp.Partition.Partition).Int32("changelog_partition", id).
			Bool("warm_up", cp.WarmUp).Msg("standby copy started")
	}
	if len(sb.start) > 0 {
		select {
		case sb.wake <- struct{}{}:
		default:
		}
	}
}

// newCopy returns an empty copy of changelog partition id, read from its
// start.
func (c *Consumer) newCopy(id int32, tp placement.Partition, now int64) *standbyCopy {
	w := c.core.Warm(id)
	cp := &standbyCopy{tp: tp, s: state.NewStandbyOf(w.Restorer(), 0, now), w: w}
	cp.build.Init(&c.locks, rankCopy, "standbyCopy.build")
	return cp
}

// drop forgets the copy of changelog partition id. sb.mu is held.
func (sb *standbys) drop(id int32) {
	delete(sb.copies, id)
	if sb.start[id] {
		delete(sb.start, id) // never read
		return
	}
	sb.stop = append(sb.stop, id)
}

// takeStandby takes the copy of changelog partition id away from the
// copies, for its partition's restore (which claims it: claimStandby);
// nil if there is none. Consumer.mu may be held.
func (c *Consumer) takeStandby(id int32) *standbyCopy {
	sb := c.standby
	sb.mu.Lock()
	defer sb.mu.Unlock()
	cp := sb.copies[id]
	if cp == nil {
		return nil
	}
	sb.drop(id)
	c.m.StandbyLagRecords.DeleteLabelValues(strconv.Itoa(int(id)))
	c.m.StandbyLagSeconds.DeleteLabelValues(strconv.Itoa(int(id)))
	return cp
}

// claimStandby waits for the reader to be done with cp, taken away
// (takeStandby), and returns the read of p that goes on from it: only
// the changelog's tail is read, into the copy's built state. nil if the
// copy cannot go on (its restore reads the changelog from its start).
// Consumer.mu is not held: the reader may be building a fetch.
func (c *Consumer) claimStandby(p *partition, cp *standbyCopy) *partRead {
	cp.build.Lock()
	defer cp.build.Unlock()
	cp.taken = true
	if err := cp.w.Err(); err != nil {
		return nil
	}
	pr := goOn(p, cp.w.Restorer(), cp.s.Next(), true)
	pr.warm = cp.w
	return pr
}

// copyLags are the copies and how many changelog records each is behind
// (placement.Unknown before its first end), for the instance's joins.
// Called from the Kafka client's goroutines.
func (c *Consumer) copyLags() map[placement.Partition]int64 {
	sb := c.standby
	sb.mu.Lock()
	defer sb.mu.Unlock()
	now := c.nowMs()
	lags := make(map[placement.Partition]int64, len(sb.copies))
	for _, cp := range sb.copies {
		r, _, known := cp.s.Lag(now)
		if !known {
			r = placement.Unknown
		}
		lags[cp.tp] = r
	}
	return lags
}

// probeWarmUps asks for a rebalance once a warm-up copy is caught up
// (its partition moves here then: placement.Plan), once per copy and
// sync (after a sync that left it a warm-up, not before probeAgain), and
// at most every probeEvery: Kafka Streams' probing rebalance, asked for
// when it is due rather than on a timer. The member's join then says
// the copy's lag, so the coordinator rebalances even where this member
// is not the leader. Engine goroutine.
func (c *Consumer) probeWarmUps() {
	sb := c.standby
	if time.Since(sb.asked) < probeEvery {
		return
	}
	sb.mu.Lock()
	now, ask := c.nowMs(), false
	for id, cp := range sb.copies {
		if r, _, known := cp.s.Lag(now); cp.warm && !cp.asked && known && r <= placement.CaughtUp && time.Now().After(cp.askAgain) {
			cp.asked, ask = true, true
			c.log.Info().Str("topic", cp.tp.Topic).Int32("partition", cp.tp.Partition).Int32("changelog_partition", id).
				Int64("lag_records", r).Msg("a warm-up copy caught up: asking the group to rebalance, so that its partition moves here")
		}
	}
	sb.mu.Unlock()
	if ask {
		sb.asked = time.Now()
		c.kafka.cl.ForceRebalance()
	}
}

// changes takes the partitions the reader must start and stop reading,
// and reports whether it reads any.
func (sb *standbys) changes() (start, stop []int32, any bool) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	for id := range sb.start {
		start = append(start, id)
		sb.copies[id].reading = true
	}
	clear(sb.start)
	stop, sb.stop = sb.stop, nil
	return start, stop, len(sb.copies) > 0
}

// tailStandbys reads the copies' changelog partitions into them until
// ctx ends: one client, no group, read_committed. Its fetch errors are
// retried by the client; a copy whose records do not read is dropped (a
// restore of its partition reads the changelog from its start and says
// why).
func (c *Consumer) tailStandbys(ctx context.Context) {
	topic := c.cfg.State.ChangelogTopic
	cl, err := kgo.NewClient(append(c.kafka.readOpts[:len(c.kafka.readOpts):len(c.kafka.readOpts)],
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.FetchMaxWait(standbyPoll))...)
	if err != nil {
		c.log.Error().Err(err).Msg("standby copies: kafka client; the copies stay cold")
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var listed time.Time
	sb := c.standby
	// The copies of a session before this one go on where they were.
	sb.mu.Lock()
	for id, cp := range sb.copies {
		sb.start[id], cp.reading = true, false
	}
	sb.stop = nil
	sb.mu.Unlock()
	for ctx.Err() == nil {
		start, stop, any := sb.changes()
		if len(stop) > 0 {
			cl.RemoveConsumePartitions(map[string][]int32{topic: stop})
		}
		if len(start) > 0 {
			from := map[int32]kgo.Offset{}
			sb.mu.Lock()
			for _, id := range start {
				if cp := sb.copies[id]; cp != nil {
					from[id] = kgo.NewOffset().At(cp.s.Next())
				}
			}
			sb.mu.Unlock()
			cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})
		}
		if !any {
			select {
			case <-sb.wake:
			case <-ctx.Done():
			}
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, standbyPoll)
		fs := cl.PollFetches(pctx)
		cancel()
		c.addStandbyRecords(fs)
		if time.Since(listed) >= standbyList {
			listed = time.Now()
			lctx, cancel := context.WithTimeout(ctx, standbyList)
			lsos, err := adm.ListCommittedOffsets(lctx, topic)
			cancel()
			if err == nil {
				c.seenStandbyEnds(lsos)
			}
		}
		c.setStandbyMetrics()
	}
}

// addStandbyRecords adds a fetch's records to their copies, still held,
// and builds what they committed into each copy's windows (Core.Drain):
// each copy under its build lock, standbys.mu only to look the copies up
// and move their progress. A copy whose records do not read is dropped
// (a restore of its partition reads the changelog from its start and
// says why); one whose build fails, or must be made again (the owner cut
// over to a new generation), starts again from the changelog's start.
func (c *Consumer) addStandbyRecords(fs kgo.Fetches) {
	sb := c.standby
	type fetched struct {
		cp *standbyCopy
		fp kgo.FetchTopicPartition
	}
	var got []fetched
	sb.mu.Lock()
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if cp := sb.copies[fp.Partition]; cp != nil && cp.reading && fp.Err == nil {
			got = append(got, fetched{cp, fp})
		}
	})
	sb.mu.Unlock()
	for _, f := range got {
		c.buildStandby(f.cp, f.fp)
	}
}

// buildStandby adds fp's records to cp and builds them.
func (c *Consumer) buildStandby(cp *standbyCopy, fp kgo.FetchTopicPartition) {
	cp.build.Lock()
	defer cp.build.Unlock()
	if cp.taken {
		return
	}
	sb := c.standby
	now := c.nowMs()
	sb.mu.Lock()
	if sb.copies[fp.Partition] != cp { // dropped meanwhile
		sb.mu.Unlock()
		return
	}
	for _, r := range fp.Records {
		if r.Attrs.IsControl() {
			cp.s.Skip(r.Offset)
			continue
		}
		var tag []byte
		for _, h := range r.Headers {
			if h.Key == pipeline.TagHeader {
				tag = h.Value
			}
		}
		if err := cp.s.Add(r.Offset, r.Key, r.Value, tag); err != nil {
			c.log.Error().Err(err).Str("changelog_topic", r.Topic).Int32("changelog_partition", r.Partition).Int64("offset", r.Offset).
				Msg("a standby copy's changelog record does not read: the copy is dropped")
			sb.drop(fp.Partition)
			sb.mu.Unlock()
			return
		}
	}
	cp.s.Seen(fp.LastStableOffset, now)
	sb.mu.Unlock()
	if err := c.core.Drain(cp.w); err != nil {
		c.log.Warn().Err(err).Str("changelog_topic", fp.Topic).Int32("changelog_partition", fp.Partition).
			Msg("a standby copy's windows cannot be built on: the copy starts again from the changelog's start")
		sb.mu.Lock()
		if sb.copies[fp.Partition] == cp {
			fresh := c.newCopy(fp.Partition, cp.tp, now)
			fresh.warm, fresh.asked, fresh.askAgain = cp.warm, cp.asked, cp.askAgain
			sb.drop(fp.Partition)
			sb.copies[fp.Partition], sb.start[fp.Partition] = fresh, true
		}
		sb.mu.Unlock()
	}
}

// seenStandbyEnds tells the copies their partitions' last stable offsets.
func (c *Consumer) seenStandbyEnds(lsos kadm.ListedOffsets) {
	sb := c.standby
	now := c.nowMs()
	sb.mu.Lock()
	defer sb.mu.Unlock()
	for id, cp := range sb.copies {
		if o, ok := lsos.Lookup(c.cfg.State.ChangelogTopic, id); ok && o.Err == nil {
			cp.s.Seen(o.Offset, now)
		}
	}
}

// setStandbyMetrics sets each copy's lag gauges.
func (c *Consumer) setStandbyMetrics() {
	sb := c.standby
	now := c.nowMs()
	sb.mu.Lock()
	defer sb.mu.Unlock()
	for id, cp := range sb.copies {
		r, ms, known := cp.s.Lag(now)
		if !known {
			continue
		}
		label := strconv.Itoa(int(id))
		c.m.StandbyLagRecords.WithLabelValues(label).Set(float64(r))
		c.m.StandbyLagSeconds.WithLabelValues(label).Set(float64(ms) / 1000)
	}
}
