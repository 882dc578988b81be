package state

import (
	"aggregator/internal/ready"
	"aggregator/internal/windowing"
)

// An Encoder encodes the changelog records of one commit at a time. The
// keys and values of a commit's entries go into one buffer, sliced once
// it is complete (appending moves it): two allocations per entry were
// most of a commit's garbage. The producer holds the records until they
// are written, so a buffer serves the next commit only once Accept says
// it is written. The zero Encoder is ready to use; it is not safe for
// concurrent use.
type Encoder struct {
	data  []ready.Changelog // the commit's records (Begin to Finish)
	buf   []byte            // their bytes
	first int               // the first record whose bytes are in buf
	ends  [][2]int          // where each one's key and value end in buf
	// The buffer of the last commit's records, and one whose records are
	// written (Accept): the next commit's.
	last, spare []byte
	// The size of the last buffer and the number of its records: the
	// next one's capacities.
	bytes, records int
}

// Begin starts a commit's records.
func (e *Encoder) Begin() {
	// One allocation, as large as the last commit's: growing it from
	// nothing copied it a dozen times in a commit of a few thousand.
	e.data = make([]ready.Changelog, 0, e.records)
	e.buf, e.spare = e.spare, nil
	if e.buf == nil {
		e.buf = make([]byte, 0, e.bytes)
	}
	e.ends = e.ends[:0]
	e.first = -1
}

// Add adds a record whose bytes are its own (a repair). Add every one of
// them before the first Entry.
func (e *Encoder) Add(r ready.Changelog) { e.data = append(e.data, r) }

// Entry adds the record of a window state entry of its partition (a
// tombstone if it was deleted), under tag.
func (e *Encoder) Entry(en *windowing.Entry, tag uint64) {
	if e.first < 0 {
		e.first = len(e.data)
	}
	e.buf = AppendKey(e.buf, en)
	keyEnd := len(e.buf)
	if !en.Deleted {
		e.buf = AppendValue(e.buf, en, tag)
	}
	e.ends = append(e.ends, [2]int{keyEnd, len(e.buf)})
	e.data = append(e.data, ready.Changelog{Partition: en.Partition, Tag: tag})
}

// GenerationEntry is Entry for an entry of the generation of
// config_version gen whose entries have generation keys
// (AppendGenerationKey; a generation whose record says LegacyKeys writes
// Entry's).
func (e *Encoder) GenerationEntry(gen int64, en *windowing.Entry, tag uint64) {
	if e.first < 0 {
		e.first = len(e.data)
	}
	e.buf = AppendGenerationKey(e.buf, gen, en)
	keyEnd := len(e.buf)
	if !en.Deleted {
		e.buf = AppendValue(e.buf, en, tag)
	}
	e.ends = append(e.ends, [2]int{keyEnd, len(e.buf)})
	e.data = append(e.data, ready.Changelog{Partition: en.Partition, Tag: tag})
}

// Finish returns the commit's records. Their bytes are valid until the
// Accept after the next Finish.
func (e *Encoder) Finish() []ready.Changelog {
	start := 0
	for i, end := range e.ends {
		r := &e.data[e.first+i]
		r.Key = e.buf[start:end[0]:end[0]]
		if end[1] > end[0] {
			r.Value = e.buf[end[0]:end[1]:end[1]]
		}
		start = end[1]
	}
	e.bytes, e.records, e.last = len(e.buf), len(e.data), e.buf
	data := e.data
	e.data, e.buf = nil, nil
	return data
}

// Accept tells the encoder that the last Finish's records are written:
// their buffer serves the next commit.
func (e *Encoder) Accept() { e.spare, e.last = e.last[:0], nil }

// Drop tells the encoder that the last Finish's records were not written
// (the commit aborted): the client may still hold them, so their buffer
// is not used again.
func (e *Encoder) Drop() { e.last = nil }

// PositionRecord is the changelog record of a partition's position,
// under tag (written after the commit's other records of the partition).
func PositionRecord(partition int32, pos Position, tag uint64) ready.Changelog {
	return ready.Changelog{Partition: partition, Key: PositionKey(nil, partition), Value: AppendPosition(nil, pos, tag), Tag: tag}
}

// GenerationRecord is the changelog record of partition's generation g
// under tag (written in the commit of its cut-over, with its first
// entries); with retired, its tombstone (the commit that drops its last
// window).
func GenerationRecord(partition int32, g Generation, tag uint64, retired bool) ready.Changelog {
	r := ready.Changelog{Partition: partition, Key: GenerationKey(nil, partition, g.Version), Tag: tag}
	if !retired {
		r.Value = AppendGeneration(nil, g, tag)
	}
	return r
}
