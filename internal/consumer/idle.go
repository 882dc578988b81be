package consumer

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/ready"
)

// An idle service commits nothing: with no input, no output and no
// watermark movement a commit would repeat the last one (the same
// offsets; with exactly_once, a transaction every commit interval). The
// stage-1 heartbeat markers (every 10 s, docs/scaling.md#the-repartition-stage) are outputs: they are
// committed, and so is stage 2's position past them.

// idleCommit is what the last commit left, to tell whether the next one
// has anything to commit (guarded by Consumer.mu).
type idleCommit struct {
	// committed are the offsets the last commit committed; nil when
	// unknown (none yet, or an abort since): the next commit commits.
	committed map[topicPartition]int64
	// wrote says outputs were given to the writer since the last commit.
	wrote bool
}

// write gives outputs to the writer, noting that the next commit has
// something to commit. c.mu is held.
func (c *Consumer) write(outs []ready.Output) {
	if len(outs) > 0 {
		c.cycle.idle.wrote = true
	}
	c.writer.Write(outs)
}

// nothingToCommit reports whether a commit of offsets and rd would
// repeat the last one: the same offsets, no output since, and no state
// change, position or watermark to write. c.mu is held.
func (c *Consumer) nothingToCommit(offsets map[string]map[int32]kgo.EpochOffset, rd ready.Ready) bool {
	if c.cycle.idle.wrote || len(rd.Outputs) > 0 || len(rd.Changelog) > 0 ||
		len(rd.Positions) > 0 || len(rd.Watermarks) > 0 || c.cycle.idle.committed == nil {
		return false
	}
	n := 0
	for topic, ps := range offsets {
		for p, o := range ps {
			if last, ok := c.cycle.idle.committed[topicPartition{topic, p}]; !ok || last != o.Offset {
				return false
			}
			n++
		}
	}
	return n == len(c.cycle.idle.committed)
}

// noteCommitted remembers what a successful commit committed. c.mu is
// held.
func (c *Consumer) noteCommitted(offsets map[string]map[int32]kgo.EpochOffset) {
	m := make(map[topicPartition]int64, len(offsets))
	for topic, ps := range offsets {
		for p, o := range ps {
			m[topicPartition{topic, p}] = o.Offset
		}
	}
	c.cycle.idle = idleCommit{committed: m}
}

// forgetCommitted makes the next commit commit, whatever it holds: after
// an abort the last commit's offsets say nothing about what the client
// has. c.mu is held.
func (c *Consumer) forgetCommitted() { c.cycle.idle = idleCommit{} }
