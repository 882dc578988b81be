package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/store"

	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/watermark"
	"aggregator/internal/windowing"
)

// version is the first byte of every key and value this release writes.
const version = 1

// TagHeader is the header of a tombstone that holds its commit tag
// (8 bytes, big endian): a tombstone has no value to hold it. Package
// ready owns it, for the writer of a changelog record.
const TagHeader = ready.TagHeader

// Record kinds, the key's second byte.
const (
	kindSlice    = 's'
	kindWindow   = 'w'
	kindSession  = 'e'
	kindCount    = 'c'
	kindPosition = 'p'
)

// entryKinds maps an entry kind to its key's kind byte.
var entryKinds = map[windowing.EntryKind]byte{windowing.SliceEntry: kindSlice, windowing.WindowEntry: kindWindow, windowing.SessionEntry: kindSession, windowing.CountEntry: kindCount}

// ErrCorrupt is wrapped by the errors of decoding a changelog record that
// this release cannot read.
var ErrCorrupt = errors.New("unreadable changelog record")

// Position is where a partition's state stands: the next input offset to
// process and its watermark generator's state.
type Position struct {
	Offset       int64
	MaxTimestamp int64
	Watermark    int64
	// Merged is the merged watermark at the commit: the windows whose
	// cleanup time it had reached were dropped, and are not restored.
	Merged int64
	// Floor is the watermark the partition's records were judged against
	// (at least Merged: see windowing.Engine.Judged).
	Floor int64
	// Sources is a repartition partition's table of source partitions
	// (their watermarks from markers, and the source offsets applied);
	// zero for an input partition. Positions written before it existed
	// decode with a zero table.
	Sources watermark.Table
	// FilteredLead is how far the latest event time of a record the
	// partition's source.filter rejected (or whose values its aggregates
	// could not read: a dead letter) is past MaxTimestamp (by_key, whose
	// generator's MaxTimestamp counts the records the filter accepted
	// and the aggregates read only), mod 2^64; 0: none past it. In an optional trailing
	// section, written only when not 0: positions without it keep their
	// bytes, and decode with 0.
	FilteredLead uint64
}

// Latest is the latest event time the position knows the partition's
// state has seen: MaxTimestamp, or the filtered record's past it.
func (p Position) Latest() int64 {
	if p.FilteredLead == 0 {
		return p.MaxTimestamp
	}
	return int64(uint64(p.MaxTimestamp) + p.FilteredLead)
}

// LeadOf is the FilteredLead of a position whose MaxTimestamp is max and
// whose latest rejected record's event time is filtered (math.MinInt64:
// none).
func LeadOf(max, filtered int64) uint64 {
	if filtered <= max {
		return 0
	}
	return uint64(filtered) - uint64(max)
}

// AppendKey appends the changelog key of en.
func AppendKey(dst []byte, en *windowing.Entry) []byte {
	dst = append(dst, version, entryKinds[en.Kind])
	dst = binary.BigEndian.AppendUint32(dst, uint32(en.Partition))
	dst = binary.BigEndian.AppendUint64(dst, uint64(en.Start)^1<<63) // sorts as the number does
	dst = binary.AppendUvarint(dst, uint64(en.Split))
	return append(dst, en.ID...)
}

// PositionKey appends the key of partition's position record.
func PositionKey(dst []byte, partition int32) []byte {
	dst = append(dst, version, kindPosition)
	return binary.BigEndian.AppendUint32(dst, uint32(partition))
}

// AppendValue appends en's value under commit tag tag; a deleted entry has
// no value (a tombstone): use TagHeader.
func AppendValue(dst []byte, en *windowing.Entry, tag uint64) []byte {
	dst = append(dst, version)
	dst = binary.AppendUvarint(dst, tag)
	dst = binary.AppendUvarint(dst, uint64(en.Revision))
	switch en.Kind {
	case windowing.WindowEntry:
		if m := earlyMark(en); m != 0 {
			dst = append(dst, m)
		}
		return dst
	case windowing.SessionEntry:
		dst = binary.AppendVarint(dst, en.End)
	case windowing.CountEntry:
		dst = binary.AppendVarint(binary.AppendVarint(binary.AppendVarint(dst, en.Lo), en.Hi), en.First)
	}
	dst = binary.AppendUvarint(dst, uint64(en.Count))
	dst = binary.AppendUvarint(dst, uint64(len(en.Nums)))
	for _, f := range en.Nums {
		dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(f))
	}
	dst = binary.AppendUvarint(dst, uint64(len(en.Picks)))
	for _, p := range en.Picks {
		dst = appendValue(dst, p.Value)
		dst = binary.AppendVarint(dst, p.Time)
		dst = binary.AppendUvarint(dst, p.Seq)
	}
	dst = binary.AppendUvarint(dst, uint64(len(en.Sets)))
	for _, s := range en.Sets {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		for x := range s {
			dst = appendString(dst, x)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(en.Sketches)))
	for _, sk := range en.Sketches {
		var b []byte
		sk.Encode(&b, false)
		dst = appendString(dst, string(b))
	}
	// top_k counts, the early-only mark and the exact quantile values are
	// optional at the end, so values written before them still read.
	exact := hasExact(en)
	if len(en.Tops) == 0 && earlyMark(en) == 0 && !exact {
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(len(en.Tops)))
	for _, m := range en.Tops {
		dst = binary.AppendUvarint(dst, uint64(len(m)))
		for x, n := range m {
			dst = binary.AppendUvarint(appendString(dst, x), uint64(n))
		}
	}
	if m := earlyMark(en); m != 0 {
		dst = append(dst, m)
	}
	if !exact {
		return dst
	}
	dst = append(dst, sectionExact)
	dst = binary.AppendUvarint(dst, uint64(len(en.Exact)))
	for _, vs := range en.Exact {
		dst = binary.AppendUvarint(dst, uint64(len(vs)))
		for _, f := range vs {
			dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(f))
		}
	}
	return dst
}

// sectionExact starts a value's optional section of exact quantile
// values (windowing.Entry.Exact): the quantile count, then per quantile
// its value count and values. Values written before exact quantiles have
// no such section and restore from their sketches; it is left out when
// every quantile's values are in its sketch, so such values read as before.
const sectionExact = 'x'

// hasExact reports whether en holds an exact quantile value.
func hasExact(en *windowing.Entry) bool {
	for _, vs := range en.Exact {
		if len(vs) > 0 {
			return true
		}
	}
	return false
}

// earlyMark is the optional last byte of a value: 1 if the window fired
// only early, plus 2 if it changed since the last early-firing tick.
func earlyMark(en *windowing.Entry) byte {
	var m byte
	if en.EarlyOnly {
		m |= 1
	}
	if en.Changed {
		m |= 2
	}
	return m
}

// AppendPosition appends the value of a position record.
func AppendPosition(dst []byte, p Position, tag uint64) []byte {
	dst = append(dst, version)
	dst = binary.AppendUvarint(dst, tag)
	dst = binary.AppendVarint(dst, p.Offset)
	dst = binary.AppendVarint(dst, p.MaxTimestamp)
	dst = binary.AppendVarint(dst, p.Watermark)
	dst = binary.AppendVarint(dst, p.Merged)
	dst = binary.AppendVarint(dst, p.Floor)
	dst = appendSources(dst, p.Sources)
	if p.FilteredLead != 0 {
		dst = binary.AppendUvarint(append(dst, sectionFiltered), p.FilteredLead)
	}
	return dst
}

// appendSources appends a position's optional table of source
// partitions (none if t is zero).
func appendSources(dst []byte, t watermark.Table) []byte {
	if t.Count == 0 && len(t.Sources) == 0 {
		return dst
	}
	dst = append(dst, sectionSources)
	dst = binary.AppendUvarint(dst, uint64(t.Count))
	dst = binary.AppendUvarint(dst, uint64(len(t.Sources)))
	for _, src := range t.Sources {
		var flags byte
		if src.Reported {
			flags |= 1
		}
		if src.Idle {
			flags |= 2
		}
		dst = binary.AppendVarint(append(dst, flags), src.Watermark)
		dst = binary.AppendVarint(dst, src.Applied)
	}
	return dst
}

// The optional sections of a position, in this order after its fields:
// the table of source partitions, then the filtered record's lead.
// Releases before the second one read the first only (a position with
// the second is unreadable there).
const (
	sectionSources  = 's'
	sectionFiltered = 'f'
)

// sources reads a position's optional table of source partitions.
func (r *reader) sources() watermark.Table {
	if len(r.b) == 0 || r.err != nil || r.b[0] != sectionSources {
		return watermark.Table{}
	}
	r.b = r.b[1:]
	count := r.uvarint("source count")
	if count > math.MaxInt32 {
		r.fail("source count")
	}
	t := watermark.Table{Count: int32(count), Sources: make([]watermark.Source, r.count("sources"))}
	if int(t.Count) > len(t.Sources) {
		r.fail("source count")
	}
	for i := range t.Sources {
		if len(r.b) == 0 || r.b[0] > 3 {
			r.fail("source flags")
			break
		}
		flags := r.b[0]
		r.b = r.b[1:]
		t.Sources[i] = watermark.Source{Reported: flags&1 != 0, Idle: flags&2 != 0, Watermark: r.varint("source watermark"), Applied: r.varint("source applied")}
	}
	return t
}

// filteredLead reads a position's optional lead of its latest filtered
// record, the last of its sections.
func (r *reader) filteredLead() uint64 {
	var lead uint64
	if len(r.b) > 0 && r.err == nil && r.b[0] == sectionFiltered {
		r.b = r.b[1:]
		if lead = r.uvarint("filtered lead"); lead == 0 {
			r.fail("filtered lead")
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("position section")
	}
	return lead
}

// AppendTag appends the TagHeader value of tag (ready.AppendTag).
func AppendTag(dst []byte, tag uint64) []byte { return ready.AppendTag(dst, tag) }

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// appendValue writes a record.Value: numbers as their bits and JSON text,
// strings as their text and JSON text.
// appendValue appends v: a kind byte (0 text, 1 number, 2 null: a
// first/last of no value), the number or text, then Raw.
func appendValue(dst []byte, v record.Value) []byte {
	if v.Null {
		return appendString(append(dst, 2), "")
	}
	if v.IsNum {
		dst = binary.BigEndian.AppendUint64(append(dst, 1), math.Float64bits(v.Num))
	} else {
		dst = appendString(append(dst, 0), v.Str)
	}
	return appendString(dst, v.Raw)
}

// key is a decoded changelog key.
type key struct {
	kind      byte
	partition int32
	// gen is the generation (config_version) of a generation record or of
	// an entry with a generation key; hasGen is false for an entry's
	// version-1 key.
	gen    int64
	hasGen bool
	start  int64
	split  int
	// id is the group key, a view of the bytes decodeKey was given (no
	// copy): valid while they are, which the Restorer's arena never
	// changes.
	id string
}

// decodeKey decodes a changelog key (its id a view of b).
func decodeKey(b []byte) (key, error) {
	if len(b) < 6 || b[0] != version && b[0] != keyGenerations {
		return key{}, fmt.Errorf("%w: key %q: unknown version", ErrCorrupt, b)
	}
	k := key{kind: b[1], partition: int32(binary.BigEndian.Uint32(b[2:6]))}
	switch {
	case k.kind == kindPosition && b[0] == version:
		if len(b) != 6 {
			return key{}, fmt.Errorf("%w: position key %q", ErrCorrupt, b)
		}
		return k, nil
	case k.kind == kindGeneration && b[0] == version:
		if len(b) != 14 {
			return key{}, fmt.Errorf("%w: generation key %q", ErrCorrupt, b)
		}
		k.gen, k.hasGen = int64(binary.BigEndian.Uint64(b[6:14])^1<<63), true
		return k, nil
	case k.kind == kindSlice || k.kind == kindWindow || k.kind == kindSession || k.kind == kindCount:
	default:
		return key{}, fmt.Errorf("%w: key %q: unknown kind", ErrCorrupt, b)
	}
	rest := b[6:]
	if b[0] == keyGenerations {
		if len(rest) < 8 {
			return key{}, fmt.Errorf("%w: key %q: short", ErrCorrupt, b)
		}
		k.gen, k.hasGen = int64(binary.BigEndian.Uint64(rest[:8])^1<<63), true
		rest = rest[8:]
	}
	if len(rest) < 8 {
		return key{}, fmt.Errorf("%w: key %q: short", ErrCorrupt, b)
	}
	k.start = int64(binary.BigEndian.Uint64(rest[:8]) ^ 1<<63)
	split, n := binary.Uvarint(rest[8:])
	if n <= 0 || split > uint64(len(rest)-8-n) {
		return key{}, fmt.Errorf("%w: key %q: bad split", ErrCorrupt, b)
	}
	k.split, k.id = int(split), view(rest[8+n:])
	return k, nil
}

// view returns b as a string without a copy: b must not change while the
// string is in use.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// reader decodes a value; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: value: bad %s", ErrCorrupt, what)
	}
	r.b = nil
}

func (r *reader) uvarint(what string) uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint(what string) int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) u64(what string) uint64 {
	if len(r.b) < 8 {
		r.fail(what)
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) str(what string) string {
	n := r.uvarint(what)
	if n > uint64(len(r.b)) {
		r.fail(what)
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// count reads a length, bounded by the bytes left (each item takes one
// byte or more), so a corrupt length cannot make a huge allocation.
func (r *reader) count(what string) int {
	n := r.uvarint(what)
	if n > uint64(len(r.b)) {
		r.fail(what)
		return 0
	}
	return int(n)
}

// earlyOnly reads the optional mark of earlyMark.
func (r *reader) earlyOnly() (earlyOnly, changed bool) {
	if len(r.b) == 0 {
		return false, false
	}
	if m := r.b[0]; m == 0 || m > 3 {
		r.fail("early firing mark")
		return false, false
	}
	earlyOnly, changed = r.b[0]&1 != 0, r.b[0]&2 != 0
	r.b = r.b[1:]
	return earlyOnly, changed
}

// header reads the version and the tag.
func (r *reader) header() uint64 {
	if len(r.b) == 0 || r.b[0] != version {
		r.fail("version")
		return 0
	}
	r.b = r.b[1:]
	return r.uvarint("tag")
}

func decodePosition(b []byte) (Position, uint64, error) {
	r := reader{b: b}
	tag := r.header()
	p := Position{Offset: r.varint("offset"), MaxTimestamp: r.varint("max timestamp"), Watermark: r.varint("watermark"), Merged: r.varint("merged watermark"), Floor: r.varint("floor")}
	p.Sources = r.sources()
	p.FilteredLead = r.filteredLead()
	return p, tag, r.err
}

// decodeEntry fills en (whose key fields are set) from value b. It
// reuses the memory of en's slices, maps and exact values (whose lengths
// it sets): an Entry decoded into again and again allocates only for what
// its aggregates keep as text (first/last values, set members, top_k
// values) and for quantile sketches.
func decodeEntry(b []byte, en *windowing.Entry) (uint64, error) {
	r := reader{b: b}
	tag := r.header()
	en.Revision = int64(r.uvarint("revision"))
	switch en.Kind {
	case windowing.WindowEntry:
		en.EarlyOnly, en.Changed = r.earlyOnly()
		if len(r.b) != 0 && r.err == nil {
			r.err = fmt.Errorf("%w: value: %d bytes left over", ErrCorrupt, len(r.b))
		}
		return tag, r.err
	case windowing.SessionEntry:
		en.End = r.varint("session end")
	case windowing.CountEntry:
		en.Lo, en.Hi, en.First = r.varint("count low"), r.varint("count high"), r.varint("count first")
	}
	en.Count = int64(r.uvarint("count"))
	en.Nums = resize(en.Nums, r.count("nums"))
	for i := range en.Nums {
		en.Nums[i] = math.Float64frombits(r.u64("num"))
	}
	en.Picks = resize(en.Picks, r.count("picks"))
	for i := range en.Picks {
		p := &en.Picks[i]
		*p = windowing.Pick{}
		if len(r.b) == 0 {
			r.fail("pick")
			break
		}
		kind := r.b[0]
		r.b = r.b[1:]
		switch kind {
		case 1:
			p.Value = record.Value{IsNum: true, Num: math.Float64frombits(r.u64("pick"))}
		case 2:
			p.Value = record.NullValue
		default:
			p.Value.Str = r.str("pick")
		}
		p.Value.Raw = r.str("pick")
		p.Time = r.varint("pick time")
		p.Seq = r.uvarint("pick seq")
	}
	en.Sets = resize(en.Sets, r.count("sets"))
	for i := range en.Sets {
		n := r.count("set")
		s := reuse(en.Sets[i], n)
		for range n {
			s[r.str("set member")] = struct{}{}
		}
		en.Sets[i] = s
	}
	en.Sketches = resize(en.Sketches, r.count("sketches"))
	for i := range en.Sketches {
		sk, err := decodeSketch([]byte(r.str("sketch")))
		if err != nil && r.err == nil {
			r.err = err
		}
		en.Sketches[i] = sk
	}
	en.Tops, en.Exact = en.Tops[:0], en.Exact[:0]
	if len(r.b) > 0 { // top_k counts; values written before top_k end here
		en.Tops = resize(en.Tops, r.count("tops"))
		for i := range en.Tops {
			n := r.count("top_k")
			m := reuse(en.Tops[i], n)
			for range n {
				x := r.str("top_k value")
				m[x] = int64(r.uvarint("top_k count"))
			}
			en.Tops[i] = m
		}
		if len(r.b) > 0 && r.b[0] != sectionExact {
			en.EarlyOnly, en.Changed = r.earlyOnly()
		}
		r.exact(en)
	}
	if len(r.b) != 0 && r.err == nil {
		r.err = fmt.Errorf("%w: value: %d bytes left over", ErrCorrupt, len(r.b))
	}
	return tag, r.err
}

// resize returns s with length n, reusing its memory if it has room.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// reuse returns m emptied, or a new map for n items if m is nil.
func reuse[V any](m map[string]V, n int) map[string]V {
	if m == nil {
		return make(map[string]V, n)
	}
	clear(m)
	return m
}

// exact reads the optional section of exact quantile values into en.Exact.
func (r *reader) exact(en *windowing.Entry) {
	if len(r.b) == 0 || r.b[0] != sectionExact || r.err != nil {
		return
	}
	r.b = r.b[1:]
	en.Exact = resize(en.Exact, r.count("exact quantiles"))
	for i := range en.Exact {
		vs := resize(en.Exact[i], r.count("exact values"))
		for j := range vs {
			vs[j] = math.Float64frombits(r.u64("exact value"))
		}
		en.Exact[i] = vs
	}
}

// decodeSketch decodes a quantile sketch into a sparse store (a corrupt
// index cannot make it allocate a page per index in between) and checks
// every bin: an index the mapping can make, a positive finite count.
func decodeSketch(b []byte) (*ddsketch.DDSketch, error) {
	sk, err := ddsketch.DecodeDDSketch(b, store.SparseStoreConstructor, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: sketch: %v", ErrCorrupt, err)
	}
	m := sk.IndexMapping
	lo, hi := m.Index(m.MinIndexableValue()), m.Index(m.MaxIndexableValue())
	ok := goodCount(sk.GetZeroCount()) || sk.GetZeroCount() == 0
	for _, st := range []store.Store{sk.GetPositiveValueStore(), sk.GetNegativeValueStore()} {
		st.ForEach(func(index int, count float64) bool {
			ok = ok && index >= lo && index <= hi && goodCount(count)
			return !ok
		})
	}
	if !ok {
		return nil, fmt.Errorf("%w: sketch: bin out of range", ErrCorrupt)
	}
	return sk, nil
}

func goodCount(c float64) bool { return c > 0 && !math.IsInf(c, 0) }
