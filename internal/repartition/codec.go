package repartition

import (
	"encoding/binary"
	"errors"
	"fmt"

	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/watermark"
	"aggregator/internal/wire"
)

// Header is the header of a marker and of a Format1 data record: its
// value says whether the record is data (an input record, with where it
// came from) or a watermark marker (and the marker), versioned. A
// Format2 data record has no headers.
const Header = "aggregator.repartition"

const (
	version    = 1 // of the Header value (markers, and data records of format 1)
	version2   = 2 // of a data record's value (format 2)
	version3   = 3 // of a data record's value (format 3)
	version4   = 4 // of a group's value (format 4)
	kindData   = 'd'
	kindMarker = 'm'
	kindGroup  = 'g'
	hasKey     = 1 // data: the input record had a key (else it was null)

	flagFiltered = 1 // format 3: the filter of the config that made the form rejected the record
)

// Formats of a data record (state.repartition_format). Stage 2 reads
// all four.
const (
	// Format1 is the format of the releases before Format2: the Header,
	// the input value as the value, which stage 2 decodes again.
	Format1 = 1
	// Format2 is a record without headers: its value holds what the
	// Header holds, the record as stage 1 decoded it (Decoder.AppendCompact),
	// which stage 2 reads instead of decoding the input value again, and
	// the input value (a late event's payload). Headers cost the Kafka
	// client's reader an allocation for each and one for their slice.
	Format2 = 2
	// Format3 is Format2 with a flags byte after the kind, for a stage 1
	// that forwards the records its config's source.filter rejects too
	// (stage 2 filters, per generation: a generation of another filter
	// may accept them): a filtered record's form is the whole record
	// (record.Decoder.DecodeAll) and its flag says the filter rejected
	// it; a record its decoder could not decode past the group key
	// (filtered or not: a value the aggregates of another generation may
	// read) has no form (length 0), and stage 2 decodes its value.
	// Releases before it read formats 1 and 2 only.
	Format3 = 3
	// Format4 is Format3 for a record that goes alone, plus groups:
	// stage 1 folds records of one group key and pane into a partial, and
	// sends the partials of one source partition for one repartition
	// partition together (docs/design.md#two-phase-aggregation; a Group).
	// Releases before it read formats 1 to 3 only.
	Format4 = 4
)

// ForwardsFiltered reports whether a stage 1 writing format forwards the
// records its config's source.filter rejects (Format3 and later), for
// stage 2 to filter per generation.
func ForwardsFiltered(format int32) bool { return format >= Format3 }

// ErrCorrupt is the error of a repartition record this release cannot read.
var ErrCorrupt = errors.New("repartition: corrupt record")

// AppendData appends the Header value of a data record made from in:
// the input record's dense partition id, Kafka partition, offset,
// timestamp, the number of source partitions, its source's watermark
// after it and before it (as the difference, mod 2^64: both may be minus
// infinity), topic and key (the value travels as the record's value).
func AppendData(dst []byte, in *ready.Input) []byte {
	dst = appendSource(append(dst, version, kindData), in)
	if in.Key == nil {
		return append(dst, 0)
	}
	return append(append(dst, hasKey), in.Key...)
}

// AppendValue appends the value of a Format2 data record made from in
// and form, the compact form of its decoded record: version 2, kind 'd',
// the fields of AppendData (the input key now with its length), form
// with its length, and the input value, to the end.
func AppendValue(dst []byte, in *ready.Input, form []byte) []byte {
	return appendValue(append(dst, version2, kindData), in, form)
}

// AppendValue3 appends the value of a Format3 data record made from in
// and form (nil: none): version 3, kind 'd', a flags byte (filtered: the
// filter of the config that made form rejected the record), then what
// AppendValue appends after its kind.
func AppendValue3(dst []byte, in *ready.Input, form []byte, filtered bool) []byte {
	var flags byte
	if filtered {
		flags = flagFiltered
	}
	return appendValue(append(dst, version3, kindData, flags), in, form)
}

func appendValue(dst []byte, in *ready.Input, form []byte) []byte {
	dst = appendSource(dst, in)
	if in.Key == nil {
		dst = append(dst, 0)
	} else {
		dst = append(binary.AppendUvarint(append(dst, hasKey), uint64(len(in.Key))), in.Key...)
	}
	dst = append(binary.AppendUvarint(dst, uint64(len(form))), form...)
	return append(dst, in.Value...)
}

// ValueSize is an upper bound of the length of AppendValue's and
// AppendValue3's bytes.
func ValueSize(in *ready.Input, form []byte) int {
	return 3 + 8*binary.MaxVarintLen64 + len(in.Topic) + 1 + len(in.Key) + 2*binary.MaxVarintLen64 + len(form) + len(in.Value)
}

// appendSource appends where in came from, and its source's watermarks.
func appendSource(dst []byte, in *ready.Input) []byte {
	dst = binary.AppendUvarint(dst, uint64(in.Partition))
	dst = binary.AppendUvarint(dst, uint64(in.KafkaPartition))
	dst = binary.AppendVarint(dst, in.Offset)
	dst = binary.AppendVarint(dst, in.Timestamp)
	dst = binary.AppendUvarint(dst, uint64(in.Sources))
	dst = binary.AppendVarint(dst, in.After)
	dst = binary.AppendUvarint(dst, uint64(in.After)-uint64(in.Before))
	dst = binary.AppendUvarint(dst, uint64(len(in.Topic)))
	return append(dst, in.Topic...)
}

// ParseValue reads the value of a Format2 or Format3 data record read
// from repartition partition partition at offset into in, as Parse does
// (Key and Value point into value), and returns the compact form of its
// decoded record (nil: a Format3 record without one, whose value stage 2
// decodes) and whether the filter of the config that made the form
// rejected the record (Format3).
func ParseValue(value []byte, partition int32, offset int64, topics []string, in *ready.Input) (form []byte, filtered bool, err error) {
	if len(value) < 2 || value[0] != version2 && value[0] != version3 || value[1] != kindData {
		return nil, false, fmt.Errorf("%w: a record without headers that is not of format 2 or 3", ErrCorrupt)
	}
	r := wire.Reader{B: value[2:]}
	if value[0] == version3 {
		switch r.Byte() {
		case 0:
		case flagFiltered:
			filtered = true
		default:
			return nil, false, fmt.Errorf("%w: unknown flags", ErrCorrupt)
		}
	}
	source(&r, partition, offset, topics, in)
	switch r.Byte() {
	case 0:
	case hasKey:
		in.Key = r.Counted()
	default:
		r.Fail()
	}
	form = r.Counted()
	if r.Bad() {
		return nil, false, ErrCorrupt
	}
	if len(form) == 0 && value[0] == version3 {
		form = nil
	}
	in.Value = r.B
	return form, filtered, nil
}

// source reads what appendSource wrote into in, a record of repartition
// partition partition at offset.
func source(r *wire.Reader, partition int32, offset int64, topics []string, in *ready.Input) {
	*in = ready.Input{Partition: partition, RepartitionOffset: offset,
		SourceID: r.Int32(), KafkaPartition: r.Int32(), Offset: r.Varint(), Timestamp: r.Varint(),
		Sources: r.Int32(), After: r.Varint()}
	in.Before = int64(uint64(in.After) - r.Uvarint())
	in.Topic = topic(r.Counted(), topics)
}

// AppendRepart appends to dst the bytes of r, a data record, in format
// (Format1; Format3 and Format4: the value of AppendValue3 of r.In,
// r.Record and r.Filtered; else Format2: the value of AppendValue of r.In
// and r.Record)
// and sets r.Header and r.Encoded to say how the repartition topic's
// record holds them (ready.Repart). r.Encoded is dst's new part; dst has
// room for it (RepartSize), or it grows out of it.
func AppendRepart(dst []byte, r *ready.Repart, format int32) []byte {
	start := len(dst)
	if format == Format1 {
		dst = AppendData(dst, &r.In)
		r.Header, r.Encoded = Header, dst[start:len(dst):len(dst)]
		return dst
	}
	if format >= Format3 {
		dst = AppendValue3(dst, &r.In, r.Record, r.Filtered)
	} else {
		dst = AppendValue(dst, &r.In, r.Record)
	}
	r.Header, r.Encoded = "", dst[start:len(dst):len(dst)]
	return dst
}

// RepartSize is an upper bound of the length of AppendRepart's bytes.
func RepartSize(r *ready.Repart, format int32) int {
	if format == Format1 {
		return 2 + 8*binary.MaxVarintLen64 + len(r.In.Topic) + 1 + len(r.In.Key)
	}
	return ValueSize(&r.In, r.Record)
}

// MarkerRepart returns the Repart of a marker record of m, encoded.
func MarkerRepart(m watermark.Mark) *ready.Repart {
	return &ready.Repart{Mark: m, Header: Header, Encoded: AppendMarker(nil, m)}
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
	r := wire.Reader{B: header[2:]}
	switch header[1] {
	case kindMarker:
		m = watermark.Mark{Source: r.Int32(), Count: r.Int32(), Watermark: r.Varint()}
		idle := r.Byte()
		m.Idle = idle == 1
		if idle > 1 || len(r.B) != 0 {
			r.Fail()
		}
		return m, true, corrupt(&r)
	case kindData:
		source(&r, partition, offset, topics, in)
		in.Value = value
		if r.Byte() == hasKey {
			in.Key = r.B
			if in.Key == nil {
				in.Key = []byte{}
			}
		}
		return m, false, corrupt(&r)
	}
	return m, false, fmt.Errorf("%w: unknown kind %q", ErrCorrupt, header[1])
}

// Decode sets rec for a data record that Parse or ParseValue read into
// in, as stage 1 decoded it: from form, the compact form ParseValue
// returned (filtered: its verdict), with key the record's Kafka key (its
// group key), or, for a Format1 record or one without a form (form nil),
// by decoding in.Value with dec (DecodeTimed, as for a form made under
// another config: the time of a record dec's filter rejects is read). A form this release cannot read is a *record.DecodeError with
// record.ReasonBadRepartitionRecord.
func Decode(dec *record.Decoder, form []byte, filtered bool, key []byte, in *ready.Input, rec *record.Record) (record.Kind, error) {
	if form == nil {
		return dec.DecodeTimed(in, rec)
	}
	return dec.DecodeForm(key, form, filtered, in, rec)
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

// corrupt is ErrCorrupt if r met bytes it could not read, else nil.
func corrupt(r *wire.Reader) error {
	if r.Bad() {
		return ErrCorrupt
	}
	return nil
}
