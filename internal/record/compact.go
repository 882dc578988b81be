package record

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"math"
	"strings"

	"aggregator/internal/wire"
)

// The compact form of a decoded event is what the engine reads of it
// (event time, gap, key fields, aggregate values) in a few bytes, so that
// a record decoded once need not be decoded again: stage 1 of
// source.partitioning repartition writes it beside the input value, and
// stage 2 reads it instead of the value (package repartition carries it).
//
//	version     1 byte (compactVersion)
//	spec        4 bytes: a hash of the Spec of the decoder that made it
//	time, gap   varints
//	key fields  uvarint count, then one value each
//	values      uvarint count, then one value each (one per aggregate)
//
// A value is a flags byte, then, in this order, what its flags say
// follows: Num as 8 bytes (little-endian IEEE 754); Raw as its offset and
// length in the group key (a key field's Raw is text of its key) or as a
// length and the bytes; Str as a length and the bytes, unless it is Raw
// or Raw without its quotes.
//
// A form is read only by a decoder of the same Spec: one of another (the
// config changed between the instance that wrote it and the one that
// reads it, during a rollout) decodes the input value instead, as if
// there were no form.
const compactVersion = 1

const (
	compactNum       = 1 << iota // Num follows; IsNum
	compactRawAt                 // Raw is the key's text at an offset, length
	compactRaw                   // Raw's bytes follow
	compactStrRaw                // Str is Raw
	compactStrQuoted             // Str is Raw without its quotes
	compactStr                   // Str's bytes follow
	compactNull                  // the field was absent or null: Value.Null, the aggregate skips it
	compactFlags     = compactNull<<1 - 1
)

// specTag is a hash of spec, which a compact form carries.
func specTag(spec Spec) uint32 {
	loc := "UTC"
	if spec.Location != nil {
		loc = spec.Location.String()
	}
	spec.Location = nil
	h := fnv.New32a()
	fmt.Fprintf(h, "%#v %q", spec, loc)
	return h.Sum32()
}

// SpecTag is the hash of the decoder's Spec that its compact forms carry:
// a form is read only by a decoder of the same tag.
func (d *Decoder) SpecTag() uint32 { return d.specTag }

// OwnForm reports whether compact form b was made by a decoder of this
// decoder's Spec (a form of another is decoded from the input value).
func (d *Decoder) OwnForm(b []byte) bool {
	return len(b) >= 5 && b[0] == compactVersion && binary.LittleEndian.Uint32(b[1:]) == d.specTag
}

// AppendCompact appends the compact form of rec, an Event that d's Decode
// returned, to dst.
func (d *Decoder) AppendCompact(dst []byte, rec *Record) []byte {
	dst = append(dst, compactVersion)
	dst = binary.LittleEndian.AppendUint32(dst, d.specTag)
	dst = binary.AppendVarint(dst, rec.Time)
	dst = binary.AppendVarint(dst, rec.Gap)
	dst = binary.AppendUvarint(dst, uint64(len(rec.KeyFields)))
	for i := range rec.KeyFields {
		dst = appendCompactValue(dst, &rec.KeyFields[i], rec.Key)
	}
	dst = binary.AppendUvarint(dst, uint64(len(rec.Values)))
	for i := range rec.Values {
		dst = appendCompactValue(dst, &rec.Values[i], "")
	}
	return dst
}

func appendCompactValue(dst []byte, v *Value, key string) []byte {
	var flags byte
	if v.Null {
		flags |= compactNull
	}
	if v.IsNum {
		flags |= compactNum
	}
	at := -1
	if v.Raw != "" {
		if at = strings.Index(key, v.Raw); at >= 0 {
			flags |= compactRawAt
		} else {
			flags |= compactRaw
		}
	}
	switch n := len(v.Raw); {
	case v.Str == "":
	case v.Str == v.Raw:
		flags |= compactStrRaw
	case n >= 2 && v.Raw[0] == '"' && v.Str == v.Raw[1:n-1]:
		flags |= compactStrQuoted
	default:
		flags |= compactStr
	}
	dst = append(dst, flags)
	if v.IsNum {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.Num))
	}
	switch {
	case at >= 0:
		dst = binary.AppendUvarint(binary.AppendUvarint(dst, uint64(at)), uint64(len(v.Raw)))
	case v.Raw != "":
		dst = append(binary.AppendUvarint(dst, uint64(len(v.Raw))), v.Raw...)
	}
	if flags&compactStr != 0 {
		dst = append(binary.AppendUvarint(dst, uint64(len(v.Str))), v.Str...)
	}
	return dst
}

// DecodeCompact is Decode for a record whose compact form b (from
// AppendCompact) and group key (Record.Key's bytes) are at hand: it sets
// rec as Decode did when the form was made, without reading in.Value, and
// returns Event. The key is interned as Decode interns keys. A form made
// by a decoder of another Spec is left aside: it returns
// DecodeTimed(in, rec).
// A form this release cannot read is a *DecodeError with
// ReasonBadRepartitionRecord.
func (d *Decoder) DecodeCompact(key, b []byte, in *Input, rec *Record) (Kind, error) {
	return d.DecodeForm(key, b, false, in, rec)
}

// DecodeForm is DecodeCompact for a form that carries the verdict of its
// decoder's source.filter (filtered: it rejected the record, which
// DecodeAll decoded whole): a form this decoder reads returns Filtered
// then, with rec set. A form of another Spec is left aside as in
// DecodeCompact, but decoded with DecodeTimed: this decoder's own filter,
// and the time of a record it rejects.
func (d *Decoder) DecodeForm(key, b []byte, filtered bool, in *Input, rec *Record) (Kind, error) {
	if len(b) >= 5 && b[0] == compactVersion && binary.LittleEndian.Uint32(b[1:]) != d.specTag {
		return d.DecodeTimed(in, rec)
	}
	if err := d.decodeCompact(key, b, in, rec); err != nil || !filtered {
		return Event, err
	}
	return Filtered, nil
}

func (d *Decoder) decodeCompact(key, b []byte, in *Input, rec *Record) error {
	rec.Partition, rec.Offset, rec.Time, rec.Gap = in.Partition, in.Offset, 0, 0
	rec.Key, rec.KeyFields, rec.Values = "", rec.KeyFields[:0], rec.Values[:0]
	if len(key) < 2 || key[0] != '{' || key[len(key)-1] != '}' {
		return badCompact("the group key is not a JSON object")
	}
	if len(b) < 5 || b[0] != compactVersion {
		return badCompact("unknown compact record version")
	}
	r := wire.Reader{B: b[5:]}
	rec.Time, rec.Gap = r.Varint(), r.Varint()
	rec.Key = d.internBytes(key)
	d.arena, d.pending = d.arena[:0], d.pending[:0]
	rec.KeyFields = grow(rec.KeyFields, r.Count())
	for i := range rec.KeyFields {
		d.compactValue(&r, &rec.KeyFields[i], rec.Key)
	}
	rec.Values = grow(rec.Values, r.Count())
	for i := range rec.Values {
		d.compactValue(&r, &rec.Values[i], "")
	}
	if r.Bad() || len(r.B) != 0 || len(rec.KeyFields) != len(d.keys) || len(rec.Values) != len(d.aggs) {
		rec.KeyFields, rec.Values = rec.KeyFields[:0], rec.Values[:0]
		return badCompact("corrupt compact record")
	}
	d.resolvePending()
	return nil
}

func badCompact(detail string) error {
	return &DecodeError{Reason: ReasonBadRepartitionRecord, Detail: detail}
}

// compactValue reads one value into v; key is the interned group key.
func (d *Decoder) compactValue(r *wire.Reader, v *Value, key string) {
	*v = Value{}
	flags := r.Byte()
	if flags&^compactFlags != 0 || flags&compactRawAt != 0 && flags&compactRaw != 0 || flags&compactNull != 0 && flags != compactNull {
		r.Fail() // a null Value has every other field zero
		return
	}
	v.Null = flags&compactNull != 0
	if flags&compactNum != 0 {
		v.Num, v.IsNum = r.Float64(), true
	}
	raw := span{-1, -1} // Raw's place in the arena, if it is there
	switch {
	case flags&compactRawAt != 0:
		at, n := r.Uvarint(), r.Uvarint()
		if at > uint64(len(key)) || n > uint64(len(key))-at {
			r.Fail()
			return
		}
		v.Raw = key[at : at+n]
	case flags&compactRaw != 0:
		text := r.Counted()
		raw.start = len(d.arena)
		d.addPending(&v.Raw, textAsIs, text)
		raw.end = len(d.arena)
	}
	rawLen := max(len(v.Raw), raw.end-raw.start)
	switch flags & (compactStrRaw | compactStrQuoted | compactStr) {
	case 0:
	case compactStrRaw:
		if raw.start >= 0 {
			d.pending = append(d.pending, pendingString{&v.Str, raw})
		} else {
			v.Str = v.Raw
		}
	case compactStrQuoted:
		switch {
		case rawLen < 2:
			r.Fail()
		case raw.start >= 0:
			d.pending = append(d.pending, pendingString{&v.Str, span{raw.start + 1, raw.end - 1}})
		default:
			v.Str = v.Raw[1 : len(v.Raw)-1]
		}
	case compactStr:
		d.addPending(&v.Str, textAsIs, r.Counted())
	default:
		r.Fail()
	}
}

// internBytes returns key as a string, interned in a table of its own
// (Decode's table is found by the key's parts): a repeated key costs no
// allocation.
func (d *Decoder) internBytes(key []byte) string {
	t := &d.compactKeys
	if t.slots == nil {
		*t = newInternTable()
	}
	h := maphash.Bytes(t.seed, key)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; t.slots[i].key != ""; i = (i + 1) & mask {
		if s := &t.slots[i]; s.hash == h && s.key == string(key) {
			return s.key
		}
	}
	return t.add(h, key)
}
