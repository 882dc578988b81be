package repartition

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"aggregator/internal/ready"
	"aggregator/internal/wire"
)

// A Group is the partials one source partition sends one repartition
// partition at one flush (Format4, docs/design.md#two-phase-aggregation):
// where its records came from, their offsets and watermarks (read back
// only to unfold it), the spec it was folded under, and the partials
// (windowing.Folds.Append's bytes), each of one group key and pane.
type Group struct {
	// In names the source: SourceID, Topic, KafkaPartition, Sources;
	// Partition and RepartitionOffset are where the group was read;
	// Offset is its last record's offset and After its last record's
	// After (M: the highest watermark its records carry).
	In          ready.Input
	Tag         uint32 // GroupTag of the stage that folded it
	First, Last int64  // its first and last record's offsets
	Records     int
	records     []byte // the offsets and watermarks, after the first's
	partials    []byte // the partial count, then each with its length
}

// GroupTag is the tag a group carries and stage 2 compares: a hash of the
// decoder's spec (record.Decoder.SpecTag: the fields, filter and
// aggregates it reads) and of the windows' (windowing.FoldTag). A group
// of another tag is unfolded.
func GroupTag(decoder, folds uint32) uint32 {
	h := fnv.New32a()
	h.Write(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, decoder), folds))
	return h.Sum32()
}

// groupWriter builds a group's value as stage 1 folds its records: the
// records' offsets and watermarks as they come; the partials at the end.
type groupWriter struct {
	records        []byte
	n              int
	first, last    int64
	lastAfter      int64
	timestamp      int64 // the latest input timestamp, the record's
	topic          string
	kafkaPartition int32
	sourceID       int32
}

// note adds record in (its offset and watermarks) to the group.
func (g *groupWriter) note(in *ready.Input) {
	if g.n == 0 {
		g.first, g.topic, g.kafkaPartition = in.Offset, in.Topic, in.KafkaPartition
		g.records = binary.AppendVarint(g.records[:0], in.After)
		g.records = binary.AppendUvarint(g.records, uint64(in.After)-uint64(in.Before))
		g.timestamp = in.Timestamp
	} else {
		g.records = binary.AppendUvarint(g.records, uint64(in.Offset-g.last))
		g.records = binary.AppendUvarint(g.records, uint64(in.Before)-uint64(g.lastAfter))
		g.records = binary.AppendUvarint(g.records, uint64(in.After)-uint64(in.Before))
		g.timestamp = max(g.timestamp, in.Timestamp)
	}
	g.n++
	g.last, g.lastAfter = in.Offset, in.After
}

// appendHead appends the value's bytes up to the partials: version 4,
// 'g', flags, the source, the tag, the first and last offsets, M, the
// record count and the records' offsets and watermarks.
func (g *groupWriter) appendHead(dst []byte, sources int32, tag uint32) []byte {
	dst = append(dst, version4, kindGroup, 0)
	dst = binary.AppendUvarint(dst, uint64(g.sourceID))
	dst = binary.AppendUvarint(dst, uint64(g.kafkaPartition))
	dst = binary.AppendUvarint(dst, uint64(sources))
	dst = append(binary.AppendUvarint(dst, uint64(len(g.topic))), g.topic...)
	dst = binary.LittleEndian.AppendUint32(dst, tag)
	dst = binary.AppendVarint(dst, g.first)
	dst = binary.AppendVarint(dst, g.last)
	dst = binary.AppendVarint(dst, g.lastAfter)
	dst = binary.AppendUvarint(dst, uint64(g.n))
	return append(dst, g.records...)
}

// headSize is an upper bound of appendHead's length.
func (g *groupWriter) headSize() int {
	return 3 + 7*binary.MaxVarintLen64 + len(g.topic) + 4 + len(g.records)
}

// IsGroup reports whether value is a group's (Format4), not a single
// record's.
func IsGroup(value []byte) bool {
	return len(value) >= 2 && value[0] == version4 && value[1] == kindGroup
}

// ParseGroup reads a group's value, read from repartition partition
// partition at offset; topics names the input topics (Topic is one of
// them when it names one). Its slices point into value.
func ParseGroup(value []byte, partition int32, offset int64, topics []string) (*Group, error) {
	if !IsGroup(value) {
		return nil, fmt.Errorf("%w: not a group", ErrCorrupt)
	}
	r := wire.Reader{B: value[2:]}
	if r.Byte() != 0 {
		return nil, fmt.Errorf("%w: unknown group flags", ErrCorrupt)
	}
	g := &Group{In: ready.Input{Partition: partition, RepartitionOffset: offset, SourceID: r.Int32(), KafkaPartition: r.Int32(), Sources: r.Int32()}}
	g.In.Topic = topic(r.Counted(), topics)
	g.Tag = r.Uint32()
	g.First, g.Last, g.In.After = r.Varint(), r.Varint(), r.Varint()
	g.In.Offset, g.In.Before = g.Last, g.In.After
	g.Records = r.Count()
	start := r.B
	for i := range g.Records {
		if i == 0 {
			r.Varint()
		} else {
			r.Uvarint()
			r.Uvarint()
		}
		r.Uvarint()
	}
	if r.Bad() || g.Records == 0 || g.First > g.Last {
		return nil, ErrCorrupt
	}
	g.records = start[:len(start)-len(r.B)]
	g.partials = r.B
	return g, nil
}

// A Folded is one record of a group: its offset in its source partition
// and its source's watermark just before and after it.
type Folded struct{ Offset, Before, After int64 }

// AppendRecords appends the group's records to dst, in offset order.
func (g *Group) AppendRecords(dst []Folded) ([]Folded, error) {
	r := wire.Reader{B: g.records}
	off, after := g.First, int64(0)
	for i := range g.Records {
		var f Folded
		if i == 0 {
			f.After = r.Varint()
		} else {
			off += int64(r.Uvarint())
			f.Before = int64(uint64(after) + r.Uvarint())
			f.After = int64(uint64(f.Before) + r.Uvarint())
		}
		if i == 0 {
			f.Before = int64(uint64(f.After) - r.Uvarint())
		}
		f.Offset, after = off, f.After
		dst = append(dst, f)
	}
	if r.Bad() || len(r.B) != 0 || off != g.Last {
		return dst, ErrCorrupt
	}
	return dst, nil
}

// EachPartial calls fn with each partial's bytes, in order, until fn
// returns an error, which it returns.
func (g *Group) EachPartial(fn func([]byte) error) error {
	r := wire.Reader{B: g.partials}
	for range r.Count() {
		b := r.Counted()
		if r.Bad() {
			break
		}
		if err := fn(b); err != nil {
			return err
		}
	}
	if r.Bad() || len(r.B) != 0 {
		return ErrCorrupt
	}
	return nil
}
