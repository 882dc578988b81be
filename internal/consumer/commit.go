package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"aggregator/internal/cluster"
	"aggregator/internal/ready"
)

// lockedCommit is commit with its locks taken in their order: c.fetch.polling
// (exactly_once: no poll while a transaction ends), then c.mu. A
// rebalance callback takes c.mu while a poll waits for it, so the other
// order could deadlock.
func (c *Consumer) lockedCommit(ctx context.Context) error {
	if c.kafka.sess != nil {
		c.fetch.interrupt()
		c.fetch.polling.Lock()
		c.fetch.commitWaits.Store(false)
		defer c.fetch.polling.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.commit(ctx)
}

// commit makes everything processed so far durable: outputs, the state's
// changes and the partitions' positions in the changelog, and the
// consumed offsets. c.mu is held, and with exactly_once c.fetch.polling.
func (c *Consumer) commit(ctx context.Context) error {
	prev := c.cycle.lastCommit
	c.cycle.lastCommit = time.Now() // the commit cadence is the real clock's, whatever clock judges idleness
	if c.kafka.sess != nil {
		return c.commitTransaction(ctx)
	}
	return c.commitAtLeastOnce(ctx, prev)
}

// commitAtLeastOnce: outputs and state changes acknowledged, then the
// positions, then the offsets; a crash in between repeats outputs (each
// identical) but never counts a record twice (see package state).
func (c *Consumer) commitAtLeastOnce(ctx context.Context, prev time.Time) error {
	now := c.nowMs()
	rd := c.core.Commit(now)
	c.updateMetrics(now, &rd.Stats)
	offsets := kafkaOffsets(rd.Offsets)
	if c.nothingToCommit(offsets, rd) {
		c.core.Accept()
		return nil
	}
	if already := c.goneStill(); already || !c.stillMember(ctx) {
		// A zombie: the group dropped this member (the process was
		// paused past its session, or its session ended while the
		// brokers restarted) and another member may own the
		// partitions and have committed since. Asked before anything
		// is written, at every commit (a paused process is not the
		// only zombie: in TestChaos at_least_once seed 15, a
		// commit written then refused UNKNOWN_MEMBER_ID): its outputs and
		// state changes would land among the new owner's.
		c.dropAsZombie(prev, already)
		return nil
	}
	c.writer.Write(rd.Outputs)
	c.writer.Changelog(ctx, rd.Changelog)
	c.writer.Sync() // every output so far is given to the producer, so Flush waits for them all
	if err := c.flushRewriting(ctx); err != nil {
		return err
	}
	if !c.stillMember(ctx) {
		// Asked again before the positions, which make the changes
		// count: the writes can outlast the member's session (brokers
		// restarting under them, a pause), and a new owner may have
		// restored the partitions meanwhile (TestChaos
		// at_least_once seed 7: such a commit's changes and positions
		// landed after the new owner's restore and before its first
		// write, were taken as committed, and two late records were
		// lost). Without a position the changes are a commit cut short,
		// which every restore leaves out.
		c.dropAsZombie(prev, false)
		return nil
	}
	c.writer.Changelog(ctx, rd.Positions)
	c.publish(ctx, rd.Watermarks) // with the positions: the state they describe is durable first
	if err := c.flush(ctx); err != nil {
		return err
	}
	if len(offsets) == 0 {
		c.core.Accept()
		return nil
	}
	var cerr error
	c.kafka.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		cerr = errors.Join(err, commitErrors(resp))
	})
	if cerr != nil && groupMovedOn(cerr) {
		// The outputs, the state's changes and the positions are
		// written: the state the changelog holds is this commit's, and
		// whoever owns a partition next (this instance after its rejoin,
		// or another) restores it and skips the records below its
		// position that the group's offset makes it read again. Only
		// the offsets are behind; the client's heartbeat rejoins, and
		// the next commit of a partition kept commits them.
		c.m.Commits.WithLabelValues("rejected").Inc()
		c.log.Warn().Err(cerr).Msg("offset commit refused: the group moved on without this member (a rebalance or a lost session); rejoining, the state and outputs are written")
		c.writer.Committed()
		c.core.Accept()
		return nil
	}
	if cerr != nil {
		c.m.Commits.WithLabelValues("aborted").Inc()
		return fmt.Errorf("commit: %w", cerr)
	}
	c.m.Commits.WithLabelValues("committed").Inc()
	c.noteCommitted(offsets)
	c.writer.Committed()
	c.core.Accept()
	c.purge(rd.Offsets)
	return nil
}

// dropAsZombie ends a commit of a member the group dropped: it writes
// nothing more, commits no offset, and drops every partition at once (the
// client revokes or loses every one as it rejoins, and the rejoin assigns
// them afresh, restored from the changelog): a commit that wrote a
// position for them later (the one on revoke) would cover the changes not
// written here (TestChaos at_least_once seed 12: 2 records of 3
// keys missing from a window). A pause between the question and the
// writes it guards is what at_least_once cannot rule out
// (docs/delivery.md). already: the coordinator said so before, in this
// generation (logged then).
func (c *Consumer) dropAsZombie(prev time.Time, already bool) {
	c.cycle.gone, c.cycle.goneGen = true, c.generation()
	c.m.Commits.WithLabelValues("rejected").Inc()
	if !already {
		c.log.Warn().Dur("since_last_commit", time.Since(prev)).
			Msg("the group session was lost (a zombie: paused past it, or dropped while the brokers restarted): its commit writes nothing more, its partitions are dropped; rejoining")
	}
	c.core.Accept()
	all := make([]*partition, 0, len(c.parts.byTP))
	for _, p := range c.parts.byTP {
		all = append(all, p)
	}
	c.drop(all)
}

// generation is the group generation the client is in (-1: none).
func (c *Consumer) generation() int32 {
	_, gen := c.kafka.cl.GroupMetadata()
	return gen
}

// goneStill reports whether the coordinator said this member is gone, and
// the client has not joined a generation since.
func (c *Consumer) goneStill() bool {
	return c.cycle.gone && c.generation() == c.cycle.goneGen
}

// stillMember asks the group coordinator with a heartbeat whether this
// member is still in the group. The client's own heartbeat would say it
// too, but its lost callback waits for this commit to end. Only an answer
// that the member is gone (UNKNOWN_MEMBER_ID: its session expired;
// FENCED_INSTANCE_ID) says no; ILLEGAL_GENERATION is a rebalance the
// member takes part in (its revoked partitions are committed then), and
// brokers out of reach leave the commit to its own errors.
func (c *Consumer) stillMember(ctx context.Context) bool {
	member, gen := c.kafka.cl.GroupMetadata()
	if member == "" {
		return true // never joined: nothing to commit either
	}
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = c.cfg.Source.Group, member, gen
	if c.cfg.Source.InstanceID != "" {
		req.InstanceID = &c.cfg.Source.InstanceID
	}
	resp, err := req.RequestWith(ctx, c.kafka.cl)
	if err != nil {
		return true
	}
	err = kerr.ErrorForCode(resp.ErrorCode)
	return !errors.Is(err, kerr.UnknownMemberID) && !errors.Is(err, kerr.FencedInstanceID)
}

// groupMovedOn reports whether an offset commit was refused because the
// group's generation moved on without this member: a rebalance under way
// or done (ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, and KIP-848's
// member epochs), or a session the coordinator ended (UNKNOWN_MEMBER_ID).
// The member rejoins; nothing is wrong with the service.
func groupMovedOn(err error) bool {
	for _, e := range []error{kerr.IllegalGeneration, kerr.UnknownMemberID, kerr.RebalanceInProgress, kerr.StaleMemberEpoch, kerr.FencedMemberEpoch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// flushRewriting is flush for outputs and state changes: the outputs
// refused for themselves (too large, invalid) get their stubs written in
// their place, until all is written or a failure of another kind.
func (c *Consumer) flushRewriting(ctx context.Context) error {
	for {
		if err := c.kafka.pr.Flush(ctx); err != nil {
			return fmt.Errorf("flush outputs: %w", err)
		}
		err := c.writer.Err()
		if err == nil || !c.writer.RewriteRefused(ctx) {
			return err
		}
	}
}

// flush waits for every record given to the producer; it fails if one
// could not be produced (nothing past it may be committed).
func (c *Consumer) flush(ctx context.Context) error {
	if err := c.writer.Err(); err != nil {
		return err
	}
	if err := c.kafka.pr.Flush(ctx); err != nil {
		return fmt.Errorf("flush outputs: %w", err)
	}
	return c.writer.Err()
}

// commitTransaction ends the open transaction, with the state's changes
// and the positions of every partition as its consumed offsets, and
// begins the next. When the transaction aborts (a rebalance took
// partitions meanwhile, the group generation moved on, a broker error),
// the pipeline goes back to the last commit (Abort): its partitions are
// restored again from the changelog, and the client rewinds to the
// committed offsets.
//
// Revocations are applied to the pipeline before its commit Ready is
// taken (their outputs are in it), and after the transaction ended only
// once the pipeline accepted or aborted it: windows that a dropped
// partition no longer holds back fire from the state the transaction
// left, into the next one.
func (c *Consumer) commitTransaction(ctx context.Context) error {
	if !c.cycle.inTxn {
		return nil // ended by Drain
	}
	c.dropRevoked()
	now := c.nowMs()
	rd := c.core.Commit(now)
	c.updateMetrics(now, &rd.Stats)
	c.writer.Write(rd.Outputs)
	offsets := kafkaOffsets(rd.Offsets)
	if len(offsets) == 0 && len(rd.Changelog) == 0 && len(rd.Positions) == 0 && len(rd.Watermarks) == 0 && len(rd.Outputs) == 0 ||
		c.nothingToCommit(offsets, rd) {
		// Nothing processed and nothing restored: the transaction holds
		// no state change (outputs come from processed records or
		// restored state, and both have a position). Ending it would cost
		// 500ms: kgo takes a commit without offsets for a broker without
		// KIP-447 and holds its session lock that long. Or, caught up and
		// idle, it would commit the last commit's offsets again (see
		// nothingToCommit). It stays open, and nothing was written to
		// accept.
		return nil
	}
	c.writer.Changelog(ctx, rd.Changelog)
	c.writer.Changelog(ctx, rd.Positions)
	c.publish(ctx, rd.Watermarks) // in the transaction: a fenced instance publishes nothing
	c.writer.Sync()
	// A failed output ends the service unless the transaction can abort
	// and the records be processed again: an output refused for itself
	// (written as a stub then), or brokers out of reach.
	if err := c.writer.Err(); err != nil && !c.writer.OnlyRefused() && !cluster.Transient(err) {
		return err
	}
	ctx = kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		// End calls this once it has flushed: kgo would commit a
		// transaction some of whose records failed; it must abort instead.
		if err := c.writer.Err(); err != nil {
			return err
		}
		setTxnOffsets(req, offsets)
		return nil
	})
	// End waits for the lost and revoked callbacks when the group moves
	// on; they run only once rebalances are allowed. No poll is under way
	// (c.fetch.polling is held), and with exactly_once they only queue.
	c.kafka.cl.AllowRebalance()
	committed, err := c.kafka.sess.End(ctx, kgo.TryCommit)
	c.cycle.inTxn = false
	// Outputs refused for themselves (too large, invalid) abort the
	// transaction; they are written as stubs when their records are
	// processed again.
	refused := c.writer.OnlyRefused()
	// The records are read again after an error the service goes on
	// from: once the brokers answer (they are out of reach, or did not
	// answer within commitTimeout), or with stubs for the outputs
	// refused. End may have left the transaction open in the client (and
	// Begin would fail): it is ended first, so that the records its abort
	// fails are gone before Abort discards the writer's failures.
	// FENCED_INSTANCE_ID answers the transaction's offset commit of a
	// static member that lost its session (a stop past it) and whose
	// client joined again meanwhile under a new member ID: the
	// transaction is a zombie's, aborted, and the member goes on (two
	// live processes with one instance ID end at the group's own
	// FENCED_INSTANCE_ID instead).
	goesOn := err != nil && !committed && (cluster.Transient(err) || refused || errors.Is(err, kerr.FencedInstanceID))
	var endErr error
	if goesOn {
		if cluster.Transient(err) {
			c.log.Warn().Err(err).Msg("transaction not committed: the brokers cannot be reached; the client keeps retrying")
		}
		endErr = c.endAborted(ctx)
	}
	if committed {
		c.m.Commits.WithLabelValues("committed").Inc()
		c.noteCommitted(offsets)
		c.writer.Committed()
		c.countCommitted()
		c.core.Accept()
		c.purge(rd.Offsets)
	} else {
		c.m.Commits.WithLabelValues("aborted").Inc()
		c.logAborted(err)
		c.abort()
	}
	c.dropRevoked() // revoked while the transaction ended: after Accept or Abort
	switch {
	case endErr != nil:
		return endErr
	case err != nil && !goesOn:
		return fmt.Errorf("end transaction: %w", err)
	}
	if c.cycle.closing {
		return nil
	}
	return c.begin()
}

// endAborted ends as an abort, in the client, a transaction that End
// returned an error for: kgo keeps it open after a flush cut short or an
// EndTxn whose outcome is unknown, so that an abort can end it. That
// abort reloads the producer ID, which bumps its epoch on the brokers
// and so aborts there whatever the EndTxn left ongoing (a commit is
// never retried: it may have been aborted meanwhile). It tries again
// while the brokers are out of reach, for up to commitTimeout; past
// that the error it returns ends the service (a restart fences the
// transaction the same way). A transaction End already ended is ended
// again at no cost but a heartbeat. In Drain it tries once, within the
// drain's deadline: nothing begins after it. c.mu and c.fetch.polling
// are held.
func (c *Consumer) endAborted(ctx context.Context) error {
	if c.cycle.closing {
		_, err := c.kafka.sess.End(ctx, kgo.TryAbort)
		if err != nil {
			return fmt.Errorf("abort transaction: %w", err) // Drain goes on if the brokers are away
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	for {
		tctx, tcancel := context.WithTimeout(ctx, endAbortTry)
		_, err := c.kafka.sess.End(tctx, kgo.TryAbort)
		tcancel()
		switch {
		case err == nil:
			return nil
		case !cluster.Transient(err):
			return fmt.Errorf("abort transaction: %w", err)
		case ctx.Err() != nil:
			// %v: a transient error would have the service go on, and
			// with the client still in the transaction it cannot.
			return fmt.Errorf("abort transaction: the client did not end it within %v: %v", commitTimeout, err)
		}
		c.log.Warn().Err(err).Msg("abort transaction: the brokers cannot be reached; trying again")
		t := time.NewTimer(endAbortBackoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// begin begins the next transaction. c.mu is held.
func (c *Consumer) begin() error {
	if err := c.kafka.sess.Begin(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	c.cycle.inTxn = true
	return nil
}

// abort drops the state of every partition since the last commit (the
// pipeline restores them before it applies their records again) and the
// polls taken before. c.mu and c.fetch.polling are held.
func (c *Consumer) abort() {
	c.forgetCommitted()
	c.core.Abort(c.nowMs())
	c.fetch.epoch.Add(1)
	c.writer.Discard()
	c.forgetUncommitted()
	c.updateReady()
}

// kafkaOffsets are a commit Ready's offsets as the client commits them.
func kafkaOffsets(offs []ready.Offset) map[string]map[int32]kgo.EpochOffset {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for _, o := range offs {
		if offsets[o.Topic] == nil {
			offsets[o.Topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[o.Topic][o.Partition] = kgo.EpochOffset{Epoch: -1, Offset: o.Offset}
	}
	return offsets
}

// setTxnOffsets makes the transaction commit the partitions' processed
// positions rather than the polled ones (the fetcher polls ahead).
func setTxnOffsets(req *kmsg.TxnOffsetCommitRequest, offsets map[string]map[int32]kgo.EpochOffset) {
	req.Topics = req.Topics[:0]
	for topic, ps := range offsets {
		t := kmsg.NewTxnOffsetCommitRequestTopic()
		t.Topic = topic
		for n, o := range ps {
			p := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			p.Partition, p.Offset, p.LeaderEpoch = n, o.Offset, -1
			t.Partitions = append(t.Partitions, p)
		}
		req.Topics = append(req.Topics, t)
	}
}

func commitErrors(resp *kmsg.OffsetCommitResponse) error {
	if resp == nil {
		return nil
	}
	var errs []error
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				errs = append(errs, fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, err))
			}
		}
	}
	return errors.Join(errs...)
}

// commitBeforeRebalance commits (exactly_once) what the engine goroutine
// applied, called by the fetcher while it holds every poll and before it
// lets a waiting rebalance in: the session aborts a transaction open
// during a revocation, and an empty one costs nothing to abort. It
// returns what the commit fails with for good (commitNow tries transient
// failures again later): the commit began no next transaction, so the
// session cannot go on (a fenced producer's is made again, see renew).
func (c *Consumer) commitBeforeRebalance(ctx context.Context) error {
	if c.kafka.sess == nil {
		return nil
	}
	return c.commitNow(ctx)
}
