package consumer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	// restoreStall is how long a changelog read may see nothing new while
	// a partition's last stable offset is at its read position (an open
	// transaction holds it) before the restore stops waiting for that
	// partition and lets the others go on: the partition waits, paused,
	// until its last stable offset moves.
	restoreStall = 2 * time.Second
	// blockedCheck is how often the last stable offsets of the changelog
	// partitions waiting so are checked.
	blockedCheck = time.Second
	// noTxnTimeout is how long a changelog partition may wait on an open
	// transaction with at_least_once (no state.transaction_timeout) before
	// it is reported: the brokers' default transaction.max.timeout.ms.
	noTxnTimeout = 15 * time.Minute
)

// blockedRestore is a partition whose changelog partition's last stable
// offset stopped its restore: an open transaction, the previous owner's
// (it ends when its producer is fenced or the broker aborts it) or a
// hanging one (it never ends). Its input is paused meanwhile; the
// engine goroutine's other partitions go on.
type blockedRestore struct {
	since   time.Time // when the read first stopped at lso
	lso     int64     // the changelog partition's last stable offset then
	end     int64     // and its end offset
	retry   bool      // the last stable offset moved: restore it again
	hanging bool      // reported as a hanging transaction
	// read is the read that stalled, up to the last stable offset: the
	// next restore goes on from it (nil: from the changelog's start).
	read *partRead
}

// stall is a changelog partition a read stopped at.
type stall struct{ lso, end int64 }

// hangingAfter is how long a changelog partition may wait on an open
// transaction before it is reported as a hanging transaction.
func (c *Consumer) hangingAfter() time.Duration {
	if c.cfg.ExactlyOnce() {
		return c.cfg.State.TransactionTimeout
	}
	return noTxnTimeout
}

// block notes that p's restore waits on an open transaction, having read
// up to it into read, and pauses its input. c.mu is held.
func (c *Consumer) block(p *partition, s stall, read *partRead) {
	if b := c.blocked[p.id]; b != nil {
		if s.lso != b.lso {
			b.since, b.lso = time.Now(), s.lso
		}
		b.end, b.retry, b.read = s.end, false, read
		return
	}
	if c.blocked == nil {
		c.blocked = map[int32]*blockedRestore{}
	}
	c.blocked[p.id] = &blockedRestore{since: time.Now(), lso: s.lso, end: s.end, read: read}
	c.kafka.cl.PauseFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.partition}})
	c.log.Info().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Str("changelog_topic", c.cfg.State.ChangelogTopic).
		Int64("last_stable_offset", s.lso).Int64("end_offset", s.end).
		Msg("restore waits for an open transaction on the changelog partition; the other partitions go on")
}

// unblock ends p's wait on an open transaction once its restore is done:
// its input resumes from the restored position (the records polled
// before it was paused were not applied), which resume sets once c.mu is
// released, to take c.fetch.polling first (ok: p waited). c.mu is held.
func (c *Consumer) unblock(p *partition, position int64) (r resume, ok bool) {
	b := c.blocked[p.id]
	if b == nil {
		return resume{}, false
	}
	delete(c.blocked, p.id)
	c.setHanging()
	if position < 0 {
		// No state: input resumes where the group's offset rules
		// started it, the first record polled and not applied.
		position = p.firstDropped
	}
	p.firstDropped = -1
	return resume{p: p, position: position, hanging: b.hanging}, true
}

// A resume is a partition whose restore waited on an open transaction,
// restored: its input resumes from position (-1: where it was paused).
type resume struct {
	p        *partition
	position int64
	hanging  bool // it was reported as a hanging transaction
}

// resume sets the fetch positions of rs and resumes their input, those
// still assigned. Engine goroutine, c.mu not held: it takes
// c.fetch.polling, then c.mu (lockorder.go).
func (c *Consumer) resume(rs []resume) {
	if len(rs) == 0 {
		return
	}
	// No poll is under way (c.fetch.polling, the poll under way ended
	// as for a commit): the polls taken before hold records fetched
	// before the pause, which p.rewound drops.
	c.fetch.interrupt()
	c.fetch.polling.Lock()
	c.fetch.commitWaits.Store(false)
	defer c.fetch.polling.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range rs {
		p := r.p
		if !c.current(p) {
			continue
		}
		if r.position >= 0 {
			p.rewound = c.fetch.rewinds.Add(1)
			c.kafka.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{p.tp.topic: {p.tp.partition: {Epoch: -1, Offset: r.position}}})
		}
		c.kafka.cl.ResumeFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.partition}})
		ev := c.log.Info()
		if r.hanging {
			ev = c.log.Warn()
		}
		ev.Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Int64("offset", r.position).
			Msg("the changelog partition's open transaction ended: the partition is restored and its input resumes")
	}
}

// forgetBlocked forgets a dropped partition's wait and resumes its input
// (a paused partition stays paused in the client across assignments).
// c.mu is held.
func (c *Consumer) forgetBlocked(p *partition) {
	if c.blocked[p.id] == nil {
		return
	}
	delete(c.blocked, p.id)
	c.kafka.cl.ResumeFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.partition}})
	c.setHanging()
}

func (c *Consumer) setHanging() {
	n := 0
	for _, b := range c.blocked {
		if b.hanging {
			n++
		}
	}
	c.m.HangingTxns.Set(float64(n))
}

// checkBlocked looks, at most every blockedCheck, at the last stable
// offsets of the changelog partitions whose restore waits: one that moved
// is restored again; one that has not moved for longer than the
// transaction timeout holds a hanging transaction, reported once with
// the producer that holds it and the command that aborts it.
func (c *Consumer) checkBlocked(ctx context.Context) {
	c.mu.Lock()
	if len(c.blocked) == 0 || time.Since(c.cycle.blockedChecked) < blockedCheck {
		c.mu.Unlock()
		return
	}
	c.cycle.blockedChecked = time.Now()
	c.mu.Unlock()
	topic := c.cfg.State.ChangelogTopic
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	adm := kadm.NewClient(c.kafka.cl)
	lsos, err := adm.ListCommittedOffsets(lctx, topic)
	if err != nil {
		return // checked again next time
	}
	c.mu.Lock()
	var report []int32
	for id, b := range c.blocked {
		o, ok := lsos.Lookup(topic, id)
		switch {
		case !ok || o.Err != nil:
		case o.Offset != b.lso:
			b.retry = true
		case !b.hanging && time.Since(b.since) > c.hangingAfter():
			b.hanging = true
			report = append(report, id)
		}
	}
	c.setHanging()
	c.mu.Unlock()
	if len(report) == 0 {
		return
	}
	described, _ := adm.DescribeProducers(lctx, kadm.TopicsSet{topic: func() map[int32]struct{} {
		m := map[int32]struct{}{}
		for _, id := range report {
			m[id] = struct{}{}
		}
		return m
	}()})
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range report {
		b := c.blocked[id]
		if b == nil {
			continue
		}
		ev := c.log.Error().Str("topic", topic).Int32("partition", id).Int64("last_stable_offset", b.lso).Int64("end_offset", b.end).
			Str("open_for", time.Since(b.since).Round(time.Second).String())
		if p := c.parts.byID[id]; p != nil {
			ev = ev.Str("input_topic", p.tp.topic).Int32("input_partition", p.tp.partition)
		}
		start, pid := b.lso, int64(-1)
		if d, ok := described[topic]; ok {
			if dp, ok := d.Partitions[id]; ok {
				for _, ap := range dp.ActiveProducers {
					if ap.CurrentTxnStartOffset >= 0 && (pid < 0 || ap.CurrentTxnStartOffset < start) {
						pid, start = ap.ProducerID, ap.CurrentTxnStartOffset
						ev = ev.Int16("producer_epoch", ap.ProducerEpoch)
					}
				}
			}
		}
		ev.Int64("producer_id", pid).Int64("start_offset", start).
			Str("abort_with", fmt.Sprintf("kafka-transactions.sh --bootstrap-server %s abort --topic %s --partition %d --start-offset %d",
				strings.Join(c.cfg.Source.Brokers, ","), topic, id, start)).
			Msgf("hanging transaction: the changelog partition's last stable offset has not moved past an open transaction for longer than %v; its partition is not restored and its input waits (the other partitions go on); abort the transaction with the command in abort_with", c.hangingAfter())
	}
}
