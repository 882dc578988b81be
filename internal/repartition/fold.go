package repartition

import (
	"encoding/binary"
	"math"

	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// Stage 1's half of two-phase aggregation
// (docs/design.md#two-phase-aggregation): the records of one source
// partition for one repartition partition, folded into partials by group
// key and pane, wait in a group until it is flushed: before a record of
// the source goes alone to that partition, before a record would join it
// whose After reaches the close of one of its panes, when it reaches
// maxGroupBytes, and at each commit, before the markers.

// maxGroupBytes is about the most a group holds: it is flushed once its
// records' list and partials reach it (Kafka's default message limit is
// 1 MiB).
const maxGroupBytes = 256 << 10

// folding is stage 1's pending groups and what it folds with.
type folding struct {
	folds   *windowing.Folds
	tag     uint32 // GroupTag of the stage's decoder and windows
	parts   int32  // the repartition topic's partitions
	allowed bool   // stage 2 welcomes partials (AllowFolding)
	// closed are, by repartition partition, the watermarks the windows of
	// the instance's own stage 2 follow (math.MinInt64 for the others): a
	// pane that closed there goes alone (AllowFolding).
	closed []int64
	// groups, by source partition (the stage's partition id), then by
	// repartition partition: nil where none is pending.
	groups  [][]*group
	scratch []byte // a group's partials, each with its length
	one     []byte // one partial's bytes
}

// group is one source partition's pending group for one repartition
// partition.
type group struct {
	groupWriter
	partials map[paneKey]*windowing.Partial
	order    []*windowing.Partial
	close    int64 // the earliest close of its panes
	size     int   // about its bytes
}

type paneKey struct {
	key   string
	start int64
}

// newFolding returns the folding of a stage of format and windows, or nil
// if it does not fold (a format before Format4, or windows that do not
// fold: windowing.ErrNoFold).
func newFolding(format int32, windows windowing.Spec, dec *record.Decoder, parts int32) (*folding, error) {
	if format < Format4 || parts <= 0 || !windowing.Foldable(windows) {
		return nil, nil
	}
	folds, err := windowing.NewFolds(windows)
	if err != nil {
		return nil, err
	}
	return &folding{folds: folds, tag: GroupTag(dec.SpecTag(), folds.Tag()), parts: parts}, nil
}

// AllowFolding says whether stage 2 welcomes partials now: the instance's
// own window partitions hold the config's generation alone and have read
// no repartition record of another config lately (a rollout). Stage 1
// sends every record alone while it does not. closed are, by repartition
// partition, the watermarks the windows of the instance's own stage 2
// follow (math.MinInt64 for a partition it does not hold): a record
// whose pane closed there is late there, and goes alone, as stage 1 read
// it (stage 2 would unfold it: docs/design.md#two-phase-aggregation),
// whatever its own source's watermark says (a new owner's generator,
// which starts afresh, below what the one before reported). It changes
// nothing for a stage that does not fold. closed is the stage's own
// until the next call.
func (s *Stage) AllowFolding(on bool, closed []int64) {
	if s.fold != nil {
		s.fold.allowed, s.fold.closed = on, closed
	}
}

// Folds reports whether the stage folds records (format 4, windows that
// fold).
func (s *Stage) Folds() bool { return s.fold != nil }

// foldRecord folds in (an accepted event of rec, its Before and After
// set) into its source's pending group for its key's partition, and
// reports whether it did: its pane's close must be above in.After.
func (s *Stage) foldRecord(in *ready.Input, rec *record.Record, part int32) bool {
	f := s.fold
	if f == nil || !f.allowed {
		return false
	}
	start, close := f.folds.Pane(rec.Time)
	if close <= in.After || int(part) < len(f.closed) && close <= f.closed[part] {
		return false
	}
	g := f.group(in.Partition, part)
	if in.After >= g.close {
		// A pane of the group closes at this record's watermark: the
		// group goes before it, so that every record of a group is
		// below the close of each of its panes.
		s.flush(in.Partition, part)
		g = f.group(in.Partition, part)
	}
	pk := paneKey{rec.Key, start}
	p := g.partials[pk]
	if p == nil {
		p = f.folds.Partial(rec, start)
		g.partials[pk] = p
		g.order = append(g.order, p)
		g.size += 48 + 2*len(rec.Key)
	}
	f.folds.Add(p, rec)
	g.note(in)
	g.close = min(g.close, close)
	g.size += 6 // the record's offset and watermarks
	for i := 0; f.folds.Grows() && i < len(rec.Values); i++ {
		// At most what the record adds to its partial: a number, or a
		// text a count_distinct set, a top_k or a pick keeps.
		g.size += 9 + len(rec.Values[i].Raw) + len(rec.Values[i].Str)
	}
	if g.size >= maxGroupBytes {
		s.flush(in.Partition, part)
	}
	return true
}

// group returns source partition src's pending group for repartition
// partition part, making it if needed.
func (f *folding) group(src, part int32) *group {
	for int(src) >= len(f.groups) {
		f.groups = append(f.groups, nil)
	}
	gs := f.groups[src]
	if gs == nil {
		gs = make([]*group, f.parts)
		f.groups[src] = gs
	}
	g := gs[part]
	if g == nil {
		g = &group{partials: map[paneKey]*windowing.Partial{}, close: math.MaxInt64}
		g.sourceID = src
		gs[part] = g
	}
	return g
}

// flush sends source partition src's pending group for repartition
// partition part, if it holds any record.
func (s *Stage) flush(src, part int32) {
	f := s.fold
	if f == nil || int(src) >= len(f.groups) || f.groups[src] == nil {
		return
	}
	g := f.groups[src][part]
	if g == nil || g.n == 0 {
		return
	}
	buf := binary.AppendUvarint(f.scratch[:0], uint64(len(g.order)))
	for _, p := range g.order {
		f.one = f.folds.Append(f.one[:0], p)
		buf = append(binary.AppendUvarint(buf, uint64(len(f.one))), f.one...)
		f.folds.Release(p)
	}
	f.scratch = buf
	if need := g.headSize() + len(buf); cap(s.forms)-len(s.forms) < need {
		s.forms = make([]byte, 0, max(formChunk, need))
	}
	start := len(s.forms)
	s.forms = append(g.appendHead(s.forms, s.sources, f.tag), buf...)
	r := s.repart(ready.Repart{In: ready.Input{Topic: g.topic, Partition: src, KafkaPartition: g.kafkaPartition, Offset: g.last,
		Timestamp: g.timestamp, SourceID: src, Sources: s.sources, After: g.lastAfter}, Partition: part, Folded: int32(g.n)})
	r.Encoded = s.forms[start:len(s.forms):len(s.forms)]
	s.outs = append(s.outs, ready.Output{Kind: ready.Repartition, Repart: r})
	g.reset()
}

// flushAll sends every pending group, in source then repartition
// partition order (a commit: before the markers).
func (s *Stage) flushAll() {
	if s.fold == nil {
		return
	}
	for src, gs := range s.fold.groups {
		for part := range gs {
			s.flush(int32(src), int32(part))
		}
	}
}

// dropGroups forgets the pending groups of source partition src (all of
// them if src < 0), unsent: their records' offsets are not committed, so
// the records are read again.
func (s *Stage) dropGroups(src int32) {
	f := s.fold
	if f == nil {
		return
	}
	for i, gs := range f.groups {
		if src >= 0 && int32(i) != src {
			continue
		}
		for _, g := range gs {
			if g == nil {
				continue
			}
			for _, p := range g.order {
				f.folds.Release(p)
			}
			g.reset()
		}
	}
}

// reset empties g for its next records.
func (g *group) reset() {
	clear(g.partials)
	clear(g.order)
	g.order, g.n, g.size, g.close = g.order[:0], 0, 0, math.MaxInt64
}
