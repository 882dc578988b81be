package repartition

import (
	"encoding/binary"
	"errors"
	"fmt"

	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/watermark"
)

// Header is the header of every repartition record: its value says
// whether the record is data (an input record, with where it came from)
// or a watermark marker (and the marker), versioned.
const Header = "aggregator.repartition"

// RecordHeader is the second header of a data record: the input record
// as stage 1 decoded it (record.AppendCompact, versioned), which stage 2
// reads instead of decoding the value again. A data record without it,
// from a release before it, is decoded from its value; a release before
// it ignores the header and decodes the value. So both releases read
// what the other writes, and a rolling upgrade mixes them.
const RecordHeader = "aggregator.record"

const (
	version    = 1
	kindData   = 'd'
	kindMarker = 'm'
	hasKey     = 1 // data: the input record had a key (else it was null)
)

// ErrCorrupt is the error of a repartition record this release cannot read.
var ErrCorrupt = errors.New("repartition: corrupt record")

// AppendData appends the Header value of a data record made from in:
// the input record's dense partition id, Kafka partition, offset,
// timestamp, the number of source partitions, its source's watermark
// after it and before it (as the difference, mod 2^64: both may be minus
// infinity), topic and key (the value travels as the record's value).
func AppendData(dst []byte, in *ready.Input) []byte {
	dst = append(dst, version, kindData)
	dst = binary.AppendUvarint(dst, uint64(in.Partition))
	dst = binary.AppendUvarint(dst, uint64(in.KafkaPartition))
	dst = binary.AppendVarint(dst, in.Offset)
	dst = binary.AppendVarint(dst, in.Timestamp)
	dst = binary.AppendUvarint(dst, uint64(in.Sources))
	dst = binary.AppendVarint(dst, in.After)
	dst = binary.AppendUvarint(dst, uint64(in.After)-uint64(in.Before))
	dst = binary.AppendUvarint(dst, uint64(len(in.Topic)))
	dst = append(dst, in.Topic...)
	if in.Key == nil {
		return append(dst, 0)
	}
	return append(append(dst, hasKey), in.Key...)
}

// AppendMarker appends the Header value of a marker record.
func AppendMarker(dst []byte, m watermark.Mark) []byte {
	dst = append(dst, version, kindMarker)
	dst = binary.AppendUvarint(dst, uint64(m.Source))
	dst = binary.AppendUvarint(dst, uint64(m.Count))
	dst = binary.AppendVarint(dst, m.Watermark)
	if m.Idle {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// Parse reads a repartition record read from repartition partition
// partition at offset: a data record fills in as the input record it was
// made from (Partition is the repartition partition, SourceID and
// RepartitionOffset are set, Key points into header; Topic is one of
// topics when it names one, which saves a string per record) and returns
// marker false; a marker record returns its Mark and marker true.
func Parse(header, value []byte, partition int32, offset int64, topics []string, in *ready.Input) (m watermark.Mark, marker bool, err error) {
	if len(header) < 2 || header[0] != version {
		return m, false, fmt.Errorf("%w: unknown version", ErrCorrupt)
	}
	r := reader{b: header[2:]}
	switch header[1] {
	case kindMarker:
		m = watermark.Mark{Source: r.int32(), Count: r.int32(), Watermark: r.varint()}
		idle := r.byte()
		m.Idle = idle == 1
		if r.err == nil && (idle > 1 || len(r.b) != 0) {
			r.err = ErrCorrupt
		}
		return m, true, r.err
	case kindData:
		*in = ready.Input{Partition: partition, Value: value, RepartitionOffset: offset,
			SourceID: r.int32(), KafkaPartition: r.int32(), Offset: r.varint(), Timestamp: r.varint(),
			Sources: r.int32(), After: r.varint()}
		in.Before = int64(uint64(in.After) - r.uvarint())
		in.Topic = topic(r.bytes(r.uvarint()), topics)
		if r.byte() == hasKey {
			in.Key = r.b
			if in.Key == nil {
				in.Key = []byte{}
			}
		}
		return m, false, r.err
	}
	return m, false, fmt.Errorf("%w: unknown kind %q", ErrCorrupt, header[1])
}

// Decode sets rec for a data record that Parse read into in, as stage 1
// decoded it: from the value of its RecordHeader (form; nil when it has
// none), with key the record's Kafka key (its group key), else by
// decoding in.Value with dec. A form this release cannot read is a
// *record.DecodeError with record.ReasonBadRepartitionRecord.
func Decode(dec *record.Decoder, form, key []byte, in *ready.Input, rec *record.Record) (record.Kind, error) {
	if form == nil {
		return dec.Decode(in, rec)
	}
	return record.Event, dec.DecodeCompact(key, form, in, rec)
}

// topic returns b as one of topics, or as a new string.
func topic(b []byte, topics []string) string {
	for _, t := range topics {
		if string(b) == t {
			return t
		}
	}
	return string(b)
}

// reader reads the fields of a header value; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err, r.b = ErrCorrupt, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) int32() int32 {
	v := r.uvarint()
	if v > 1<<31-1 {
		r.err = ErrCorrupt
		return 0
	}
	return int32(v)
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err, r.b = ErrCorrupt, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.err, r.b = ErrCorrupt, nil
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.err = ErrCorrupt
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}
