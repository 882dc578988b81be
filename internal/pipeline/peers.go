package pipeline

import "aggregator/internal/watermark"

// sharing is what a processor of source.partitioning by_key with
// watermark.scope global needs to share its partitions' watermarks with
// the group's other instances through the watermark topic (Mode.Group): which
// partitions' values it published, so that each commit Ready carries the
// ones that changed since, and the buffer those go in.
type sharing struct {
	announce *watermark.Announcer
	buf      []watermark.Mark
}

// peer applies the latest published watermark and idleness of a
// partition of the group (read from the watermark topic); it counts while
// the partition is not assigned here. Windows may fire. A processor that
// does not share watermarks ignores it.
func (p *Processor) peer(partition int32, wm int64, idle bool) {
	if p.share == nil {
		return
	}
	p.marks.Peer(partition, wm, idle)
	p.advanceMerged()
}

// groupPartition returns what the processor knows of a partition of the
// group: an assigned partition's own watermark and idleness, else its
// latest published value; reported is false for one neither assigned nor
// published yet (it holds the watermark at minus infinity). Group is the
// number of partitions (0 unless Mode.Group was set).
func (p *Processor) groupPartition(partition int32) (wm int64, idle, reported bool) {
	return p.marks.GroupPartition(partition)
}

// group is the number of partitions of the group sharing watermarks
// (Mode.Group).
func (p *Processor) group() int32 { return p.marks.Group() }

// published is a commit Ready's Watermarks: the restored partitions
// whose watermark or idleness changed since they were last published
// (taken as published: Abort publishes them all again).
func (p *Processor) published() []watermark.Mark {
	if p.share == nil {
		return nil
	}
	var ids []int32
	for id := range p.parts {
		if pp := &p.parts[id]; pp.assigned && pp.restored {
			ids = append(ids, int32(id))
		}
	}
	s := p.share
	s.buf = s.announce.Due(s.buf[:0], p.marks, ids, p.marks.Group(), 0)
	return s.buf
}

// sharedAbort carries what the other instances published over to the
// fresh generators of an aborted commit, and publishes every partition
// again at the next commit.
func (p *Processor) sharedAbort(old *watermark.Merged) {
	if p.share == nil {
		return
	}
	p.marks.TakePeers(old)
	p.share.announce.Reset()
}

// advanceMerged hands the merged watermark to every partition's
// operators, which follow it when sharing watermarks (scope global): a
// peer's value moves every partition's windows.
func (p *Processor) advanceMerged() {
	switch {
	case p.ops.merged:
		p.ops.advanceMerged(p.merged())
	case p.ops.one():
		p.ops.advance(0, p.merged())
	}
}

// sharedRevoke forgets what was published for a revoked partition: its
// next owner publishes it, and this instance again if it comes back.
func (p *Processor) sharedRevoke(partition int32) {
	if p.share != nil {
		p.share.announce.Forget(partition)
	}
}
