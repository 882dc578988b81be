package pipeline

import (
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/state"
	"aggregator/internal/watermark"
)

// Step hands over the outputs since the last Step or Commit. The Ready's
// slices are valid until the next Step or Commit.
func (p *Processor) Step() ready.Ready {
	if len(p.outs) == 0 {
		return ready.Ready{} // most records emit nothing: this inlines
	}
	return p.ready(false)
}

// Commit hands over what the shell must write for a commit: the outputs
// since the last Step, the changelog records of what changed since the
// last Commit, the partitions' positions and the offsets to commit. The
// shell calls Accept once all of it is durable, or Abort if any of it
// failed. The Ready's slices are valid until the next Step or Commit.
func (p *Processor) Commit() ready.Ready { return p.ready(true) }

func (p *Processor) ready(commit bool) ready.Ready {
	rd := ready.Ready{Commit: commit}
	if len(p.outs) > 0 {
		// The two output buffers take turns: the one handed over last
		// time is written by now.
		rd.Outputs = p.outs
		clear(p.spareOuts) // drops the references to input records and aggregates
		p.outs, p.spareOuts = p.spareOuts[:0], p.outs
		p.vals, p.spareVals = p.spareVals[:0], p.vals
	}
	if !commit {
		return rd
	}
	if p.tracking {
		rd.Changelog, rd.Positions = p.Checkpoint()
	}
	rd.Watermarks = p.published()
	for id := range p.parts {
		if pp := &p.parts[id]; pp.assigned && pp.restored && pp.next >= 0 {
			rd.Offsets = append(rd.Offsets, ready.Offset{Partition: int32(id), Offset: pp.next})
		}
	}
	return rd
}

// Accept tells the core that the last commit Ready is durable: the
// buffer its changelog records were encoded into serves the next one.
func (p *Processor) Accept() { p.enc.Accept() }

// Abort tells the core that the last commit Ready failed (the transaction
// aborted): everything since the last accepted one is void. The core goes
// back to the last accepted state, which is what the changelog holds:
// every assigned partition starts afresh, and is restored before its
// records are applied again (Unrestored lists them). Outputs not handed
// over yet are dropped.
func (p *Processor) Abort(now int64) {
	p.ops.reset()
	old := p.marks
	p.marks = watermark.NewMerged(p.cfg.Watermark)
	p.sharedAbort(old)
	if p.sources != nil {
		p.sources = watermark.NewSources(p.cfg.Watermark)
	}
	clear(p.outs)
	p.outs, p.vals = p.outs[:0], p.vals[:0]
	p.enc.Drop() // the aborted records may still be held by the client
	for id := range p.parts {
		if p.parts[id].assigned {
			p.Assign(int32(id), now)
		}
	}
}

// Apply applies a record of an assigned partition as ProcessDecoded does,
// unless the partition waits for its restore or the record is in its
// state already (below its position: the client fetched it again after a
// restore or rewind); applied is false then.
func (p *Processor) Apply(in *ready.Input, rec *record.Record, kind record.Kind, decodeErr error, now int64) (out Outcome, applied bool) {
	if int(in.Partition) >= len(p.parts) {
		return 0, false
	}
	pp := &p.parts[in.Partition]
	if !pp.restored || p.offset(in) < pp.next {
		return 0, false
	}
	if p.sources != nil && p.sources.Seen(in.Partition, in.SourceID, in.Offset) {
		pp.next = in.RepartitionOffset + 1 // a stage-1 retry wrote it again
		return 0, false
	}
	return p.ProcessDecoded(in, rec, kind, decodeErr, now), true
}

// Skip moves a partition's position past in, a record that holds no data
// (a transaction's control record, kept by the client: in has its
// partition and offset), unless the partition waits for its restore or in
// is behind its position. A partition read to its end is then at its log
// end, for its lag and its idleness.
func (p *Processor) Skip(in *ready.Input) {
	pp := p.part(in.Partition)
	if pp == nil || !pp.restored || p.offset(in) < pp.next {
		return
	}
	pp.next = p.offset(in) + 1
}

// Fetched notes the high watermark of a fetch that returned records of
// the partition: once its position reaches it, the partition is caught up
// and may become idle.
func (p *Processor) Fetched(partition int32, hwm, now int64) {
	pp := p.part(partition)
	if pp == nil || !pp.restored {
		return
	}
	pp.hwm = hwm
	p.SetCaughtUp(partition, pp.next >= hwm, now)
}

// Unrestored lists the assigned partitions that wait for their restore.
func (p *Processor) Unrestored() []int32 {
	var ids []int32
	for id := range p.parts {
		if pp := &p.parts[id]; pp.assigned && !pp.restored {
			ids = append(ids, int32(id))
		}
	}
	return ids
}

// Unfetched lists the restored partitions no fetch has returned a record
// of since their assignment, with their positions (-1: none, the group's
// offset rules apply): the shell asks the brokers whether they are at
// their log end, for an empty partition must be able to go idle too.
func (p *Processor) Unfetched() map[int32]int64 {
	var out map[int32]int64
	for id := range p.parts {
		if pp := &p.parts[id]; pp.assigned && pp.restored && pp.hwm < 0 {
			if out == nil {
				out = map[int32]int64{}
			}
			out[int32(id)] = pp.next
		}
	}
	return out
}

// Lag is the records of the partition between its position and the high
// watermark of its last fetch; ok is false until both are known.
func (p *Processor) Lag(partition int32) (lag int64, ok bool) {
	pp := p.part(partition)
	if pp == nil || pp.hwm < 0 || pp.next < 0 {
		return 0, false
	}
	return max(pp.hwm-pp.next, 0), true
}

func (p *Processor) part(partition int32) *partPos {
	if partition < 0 || int(partition) >= len(p.parts) || !p.parts[partition].assigned {
		return nil
	}
	return &p.parts[partition]
}

// TagHeader is the header of a changelog tombstone that holds its commit
// tag: a shell reading the changelog hands its value to state.Restorer.Add.
const TagHeader = state.TagHeader
