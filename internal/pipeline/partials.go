package pipeline

import (
	"errors"
	"math"

	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/repartition"
	"aggregator/internal/watermark"
	"aggregator/internal/windowing"
)

// Stage 2's half of two-phase aggregation
// (docs/design.md#two-phase-aggregation): a group of partials is merged
// when the partition's state proves that merging gives what adding its
// records one by one at its place gives; otherwise its records are read
// back from the input (an unfold) and applied one by one.

// foreignQuiet is how long stage 1 sends every record alone after stage
// 2 read a repartition record of another config (a rollout): partials of
// either config would be unfolded by the other's partitions.
const foreignQuiet = 60_000

// unfolding is a repartition partition's group that could not be merged:
// the partition waits until the shell reads the group's records back from
// their input partition (Unfolds, Unfold).
type unfolding struct {
	offset         int64 // the group's offset in the repartition partition
	topic          string
	kafkaPartition int32
	sourceID       int32
	sources        int32
	recs           []repartition.Folded
}

// An Unfold is a repartition partition's wait for the records of a group
// of partials: the shell reads Offsets (ascending) of Topic's partition
// KafkaPartition, read_committed, and hands Unfold what it found.
type Unfold struct {
	Partition      int32 // the repartition partition (the core's id)
	Topic          string
	KafkaPartition int32
	Offsets        []int64
}

// groupTag is the GroupTag of a window stage of cfg's decoder and
// windows (0: its windows do not fold, or it is not stage 2).
func groupTag(dec *record.Decoder, spec windowing.Spec, repartitioned bool) uint32 {
	if !repartitioned || !windowing.Foldable(spec) {
		return 0
	}
	return repartition.GroupTag(dec.SpecTag(), windowing.FoldTag(spec))
}

// acceptsPartials reports whether the instance's stage 1 may fold now:
// stage 2 folds for this config (groupTag), none of the instance's
// repartition partitions holds more than the config's generation, and no
// repartition record of another config was read in the last minute (a
// rollout, whose groups the other config's partitions would unfold).
func (p *Processor) acceptsPartials(now int64) bool {
	if p.groupTag == 0 || p.foreignAt != math.MinInt64 && now-p.foreignAt < foreignQuiet {
		return false
	}
	for id := range p.parts {
		if pp := &p.parts[id]; pp.assigned && pp.multi {
			return false
		}
	}
	return true
}

// appendClosed appends to dst, for each repartition partition of n, the
// watermark its windows here are judged by (math.MinInt64 for one this
// instance does not hold; math.MaxInt64 for one that waits for its
// restore, whose watermark is not known yet): stage 1 sends a record
// alone whose pane closed there (repartition.Stage.AllowFolding).
func (p *Processor) appendClosed(dst []int64, n int32) []int64 {
	for id := range n {
		wm := int64(math.MinInt64)
		switch pp := p.part(id); {
		case pp == nil:
		case !pp.restored:
			wm = math.MaxInt64
		default:
			if l := p.ops.of(id); len(l) > 0 {
				wm = l[0].op.Judged(id)
			}
		}
		dst = append(dst, wm)
	}
	return dst
}

// noteForeign notes that a repartition record of another config (its
// form's or group's spec not the config's) was read at now.
func (p *Processor) noteForeign(now int64) { p.foreignAt = now }

// applyGroup applies group g of partials, read from its repartition
// partition, unless the partition waits (for its restore or an unfold)
// or g is in its state already; applied is false then. merged is how
// many input records it aggregated by merging; a group it cannot merge
// makes the partition wait for an unfold (Unfolds), and a group whose
// records were all applied already (a stage-1 retry) is skipped.
func (p *Processor) applyGroup(g *repartition.Group, now int64) (merged int, applied bool) {
	part := g.In.Partition
	pp := p.part(part)
	if p.sources == nil || pp == nil || !pp.restored || pp.unfolding != nil || g.In.RepartitionOffset < pp.next {
		return 0, false
	}
	switch applied := p.sources.Applied(part, g.In.SourceID); {
	case g.Last <= applied:
		pp.next = g.In.RepartitionOffset + 1 // a stage-1 retry sent them again
		return 0, true
	case g.First > applied && p.mergeGroup(pp, g):
		pp.next = g.In.RepartitionOffset + 1
		return g.Records, true
	}
	recs, err := g.AppendRecords(nil) // copied: the fetch's bytes are reused
	if err != nil {
		pp.next = g.In.RepartitionOffset + 1
		p.deadLetter(&g.In, &record.DecodeError{Reason: record.ReasonBadRepartitionRecord, Detail: "a group of partials whose records cannot be read"})
		return 0, true
	}
	pp.unfolding = &unfolding{offset: g.In.RepartitionOffset, topic: g.In.Topic, kafkaPartition: g.In.KafkaPartition,
		sourceID: g.In.SourceID, sources: g.In.Sources, recs: recs}
	return 0, true
}

// mergeGroup merges g into its partition if stage 2's check passes: the
// partition holds the config's generation alone, whose decoder and
// windows folded g, and each pane of g merges at the watermark g's
// records take the partition to. It reports whether it merged.
func (p *Processor) mergeGroup(pp *partPos, g *repartition.Group) bool {
	part := g.In.Partition
	if g.Tag != p.groupTag || p.groupTag == 0 || pp.multi {
		return false
	}
	op := p.ops.at(part)
	m, ok := op.(windowing.Merger)
	if !ok || m.FoldTag() == 0 {
		return false
	}
	folded, err := g.AppendRecords(p.folded[:0])
	p.folded = folded[:0]
	if err != nil {
		return false // applyGroup dead-letters it
	}
	wm := max(op.Watermark(), p.sources.Raised(part, watermark.Mark{Source: g.In.SourceID, Count: g.In.Sources, Watermark: g.In.After}))
	if err := g.EachPartial(func(b []byte) error {
		start, err := windowing.PartialStart(b)
		if err != nil {
			return err
		}
		if !m.Mergeable(part, start, wm) {
			return errNotMergeable
		}
		return nil
	}); err != nil {
		return false
	}
	if err := g.EachPartial(func(b []byte) error { return m.Merge(part, b) }); err != nil {
		// Not reached but by a corrupt group: what merged before it stays.
		p.deadLetter(&g.In, &record.DecodeError{Reason: record.ReasonBadRepartitionRecord, Detail: err.Error()})
	}
	p.sources.Seen(part, g.In.SourceID, g.Last)
	// The source's watermark steps as its records, sent alone, would have
	// taken it, so other windows fire at the watermark they fire at then
	// (a result's watermark field); no pane of g closes at any step.
	for _, f := range folded {
		p.sourceMark(&g.In, f.Before)
		p.sourceMark(&g.In, f.After)
	}
	return true
}

// errNotMergeable stops the check of a group at its first pane that does
// not merge.
var errNotMergeable = errors.New("a pane that does not merge")

// unfolds lists the repartition partitions that wait for an unfold.
func (p *Processor) unfolds() []Unfold {
	var out []Unfold
	for id := range p.parts {
		u := p.parts[id].unfolding
		if u == nil {
			continue
		}
		offs := make([]int64, len(u.recs))
		for i, r := range u.recs {
			offs[i] = r.Offset
		}
		out = append(out, Unfold{Partition: int32(id), Topic: u.topic, KafkaPartition: u.kafkaPartition, Offsets: offs})
	}
	return out
}

// unfold applies the records of partition's group that could not be
// merged, as read back from their input partition (ins: in offset order,
// with Topic, KafkaPartition, Offset, Key, Value and Timestamp; a record
// the input no longer holds is missing): one by one, at the group's
// place, with the watermarks the group carries, skipping those the
// partition applied already. A missing record is a dead letter
// unfold_unavailable. The partition's input resumes after the group:
// next is its position (-1: it did not wait).
func (p *Processor) unfold(partition int32, ins []ready.Input, now int64, counts *Counts) (next int64) {
	pp := p.part(partition)
	if pp == nil || pp.unfolding == nil {
		return -1
	}
	u := pp.unfolding
	pp.unfolding = nil
	j := 0
	for _, f := range u.recs {
		for j < len(ins) && ins[j].Offset < f.Offset {
			j++
		}
		var in ready.Input
		found := j < len(ins) && ins[j].Offset == f.Offset
		if found {
			in = ins[j]
		} else {
			in = ready.Input{Topic: u.topic, KafkaPartition: u.kafkaPartition, Offset: f.Offset}
		}
		in.Partition, in.RepartitionOffset, in.SourceID, in.Sources, in.Before, in.After = partition, u.offset, u.sourceID, u.sources, f.Before, f.After
		if p.sources.Seen(partition, u.sourceID, f.Offset) {
			continue // applied before: a group that straddles what a stage-1 retry sent
		}
		p.unfolded++
		if !found {
			p.sourceMark(&in, in.Before)
			p.deadLetter(&in, &record.DecodeError{Reason: record.ReasonUnfoldUnavailable,
				Detail: "the input topic no longer holds the record (its retention deleted it) for stage 2 to read it back"})
			p.sourceMark(&in, in.After)
			counts[DeadLetter]++
			continue
		}
		kind, err := p.dec.DecodeTimed(&in, &p.rec)
		counts[p.processDecoded(&in, &p.rec, kind, err, now)]++
	}
	pp.next = u.offset + 1
	return pp.next
}

// takeUnfolded returns how many records Unfold applied since the last
// call.
func (p *Processor) takeUnfolded() int64 {
	n := p.unfolded
	p.unfolded = 0
	return n
}
