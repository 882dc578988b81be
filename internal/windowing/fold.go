package windowing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/store"

	"aggregator/internal/record"
	"aggregator/internal/wire"
)

// Two-phase aggregation (docs/design.md#two-phase-aggregation): stage 1
// folds the records of one group key and one pane into a Partial (Folds),
// and stage 2 merges the Partial into the key's pane (Engine.Merge) as if
// its records had been added one by one.

// partialVersion is the first byte of a Partial's encoding.
const partialVersion = 1

// Folds is stage 1's half: it finds a record's pane and the pane's close,
// folds records into Partials as the engine adds them, and encodes a
// Partial for Engine.Merge. The caller keeps the Partials; Folds keeps a
// free list of them. It is not safe for concurrent use.
type Folds struct {
	e    *Engine // its assigner and layout: it holds no window
	tag  uint32
	seq  uint64
	free []*Partial
}

// ErrNoFold is returned by NewFolds for windows whose records cannot be
// folded: session windows (a record may merge sessions), count windows
// (a window's bounds are records), global windows (no window closes) and
// early firings (a window's contents show before it closes).
var ErrNoFold = errors.New("windows that do not fold")

// NewFolds returns the Folds of spec, or ErrNoFold.
func NewFolds(spec Spec) (*Folds, error) {
	if !Foldable(spec) {
		return nil, ErrNoFold
	}
	e, err := NewEngine(spec, nil)
	if err != nil {
		return nil, err
	}
	return &Folds{e: e, tag: FoldTag(spec)}, nil
}

// Foldable reports whether records of spec's windows can be folded
// (see ErrNoFold).
func Foldable(spec Spec) bool {
	switch spec.Kind {
	case KindTumbling, KindSliding, KindCalendar:
		return spec.Early.Every <= 0
	}
	return false
}

// FoldTag is a hash of what a Partial's bytes depend on beyond the
// records' decoding: the windows' kind and bounds and the aggregate
// functions. A Partial is merged only into an engine of the same tag.
func FoldTag(spec Spec) uint32 {
	zone := ""
	if spec.Zone != nil {
		zone = spec.Zone.String()
	}
	h := fnv.New32a()
	fmt.Fprintf(h, "%d %d %d %d %d %q %v", spec.Kind, spec.Size, spec.Slide, spec.Offset, spec.Calendar, zone, spec.Aggregates)
	return h.Sum32()
}

// Grows reports whether a Partial's bytes grow with its records (first,
// last, count_distinct, quantile or top_k: state beyond numbers).
func (f *Folds) Grows() bool { return f.e.agg.hasExt() }

// Tag is FoldTag of the spec f was made of.
func (f *Folds) Tag() uint32 { return f.tag }

// Pane returns the start of the pane that holds event time t and its
// close: the maxTimestamp of the earliest-ending window that holds it,
// when that window fires every record of the pane must be in.
func (f *Folds) Pane(t int64) (start, close int64) {
	e := f.e
	c := &e.span
	if t < c.from || t >= c.to {
		e.assign(t)
	}
	return c.from, c.firstMaxTs
}

// A Partial is the fold of records of one group key into one pane: the
// pane's state as the engine keeps it. Its records are added in arrival
// order, so that first and last break ties of event time as the engine
// does.
type Partial struct {
	Start   int64
	Records int    // how many records it holds
	id      []byte // the key's sort key, then its JSON (Entry.ID)
	split   int
	own     *ownPane
}

// Partial returns an empty Partial for rec's group key and the pane at
// start (Pane's), from the free list if it can.
func (f *Folds) Partial(rec *record.Record, start int64) *Partial {
	var p *Partial
	if n := len(f.free); n > 0 {
		p, f.free = f.free[n-1], f.free[:n-1]
	} else {
		p = &Partial{own: f.e.agg.newOwnPane()}
	}
	p.id = appendSortKey(p.id[:0], rec.KeyFields)
	p.split = len(p.id)
	p.id = append(p.id, rec.Key...)
	p.Start, p.Records = start, 0
	return p
}

// Add folds rec into p, as the engine adds a record to a pane.
func (f *Folds) Add(p *Partial, rec *record.Record) {
	f.seq++
	f.e.agg.add(p.own.pane, rec, f.seq)
	p.Records++
}

// Release empties p and keeps it for a later Partial.
func (f *Folds) Release(p *Partial) {
	f.e.agg.clear(p.own.pane)
	f.free = append(f.free, p)
}

// Append appends p's encoding to dst: a version byte, the key's sort key
// and JSON (with the split), the pane's start, the record count, then
// each aggregate slot's state in the layout's order: the numeric slots
// as 8 bytes each, each pick (has it, its event time, its value), each
// count_distinct set, each quantile (its exact values, or its sketch's
// bins), each top_k's counts.
func (f *Folds) Append(dst []byte, p *Partial) []byte {
	l := &f.e.agg
	dst = append(dst, partialVersion)
	dst = append(binary.AppendUvarint(dst, uint64(len(p.id))), p.id...)
	dst = binary.AppendUvarint(dst, uint64(p.split))
	dst = binary.AppendVarint(dst, p.Start)
	v := p.own.pane
	dst = binary.AppendUvarint(dst, uint64(*v.count))
	for _, x := range v.nums {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(x))
	}
	if v.ext == nil {
		return dst
	}
	for _, pk := range v.ext.picks {
		if !pk.has {
			dst = append(dst, 0)
			continue
		}
		dst = appendPickValue(binary.AppendVarint(append(dst, 1), pk.t), &pk.v)
	}
	for _, s := range v.ext.sets {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		for x := range s {
			dst = appendCounted(dst, x)
		}
	}
	for i := range l.sketches {
		if v.ext.spilled[i] {
			var b []byte
			v.ext.sketches[i].Encode(&b, true)
			dst = append(dst, 1)
			dst = appendCounted(dst, string(b))
			continue
		}
		dst = binary.AppendUvarint(append(dst, 0), uint64(len(v.ext.exact[i])))
		for _, x := range v.ext.exact[i] {
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(x))
		}
	}
	for _, m := range v.ext.tops {
		dst = binary.AppendUvarint(dst, uint64(len(m)))
		for x, n := range m {
			dst = binary.AppendUvarint(appendCounted(dst, x), uint64(n))
		}
	}
	return dst
}

func appendCounted(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// appendPickValue appends v: a flags byte (1: a number, whose bits
// follow), then Str and Raw.
func appendPickValue(dst []byte, v *record.Value) []byte {
	if v.IsNum {
		dst = binary.LittleEndian.AppendUint64(append(dst, 1), math.Float64bits(v.Num))
	} else {
		dst = append(dst, 0)
	}
	return appendCounted(appendCounted(dst, v.Str), v.Raw)
}

// ErrBadPartial wraps the error of bytes Merge cannot read.
var ErrBadPartial = errors.New("windowing: corrupt partial")

// PartialStart returns the pane start of partial b (Folds.Append's bytes).
func PartialStart(b []byte) (int64, error) {
	r := wire.Reader{B: b}
	if r.Byte() != partialVersion {
		return 0, fmt.Errorf("%w: unknown version", ErrBadPartial)
	}
	r.Counted()
	r.Uvarint()
	start := r.Varint()
	if r.Bad() {
		return 0, ErrBadPartial
	}
	return start, nil
}

// Merger is an operator that takes stage 1's Partials: Engine.
type Merger interface {
	// FoldTag is the FoldTag of the operator's spec.
	FoldTag() uint32
	// Mergeable reports whether a Partial of partition's pane at start
	// merges as its records would add one by one, judged against wm, the
	// watermark the windows follow once the records' own watermarks are
	// in: the pane is a pane of the operator, every window that holds it
	// is in the generation's bounds and neither due at wm (nor partition's
	// floor) nor past a dropped bound, and no restored window fired ahead.
	Mergeable(partition int32, start, wm int64) bool
	// Merge adds Partial b (Folds.Append's bytes) to partition's key and
	// pane, as its records would add one by one, none of them late: the
	// caller checked Mergeable. It fires nothing.
	Merge(partition int32, b []byte) error
}

var _ Merger = (*Engine)(nil)

// FoldTag is FoldTag of the engine's spec (none for windows that do
// not fold).
func (e *Engine) FoldTag() uint32 { return e.foldTag }

// Mergeable is Merger's.
func (e *Engine) Mergeable(partition int32, start, wm int64) bool {
	if e.early.on() || e.paneStart(start) != start {
		return false
	}
	first, last := e.firstStart(start), e.lastStart(start)
	if first < e.from || last >= e.until {
		return false
	}
	judged := e.Judged(partition)
	judged = max(judged, wm)
	if judged < e.aheadUntil || e.maxTimestamp(first) <= judged {
		return false
	}
	return e.cleanupTime(first) > e.dropFor(partition, judged)
}

// Merge is Merger's.
func (e *Engine) Merge(partition int32, b []byte) error {
	r := wire.Reader{B: b}
	if r.Byte() != partialVersion {
		return fmt.Errorf("%w: unknown version", ErrBadPartial)
	}
	id := r.Counted()
	split := r.Uvarint()
	start := r.Varint()
	if r.Bad() || split > uint64(len(id)) || !looksLikeKey(string(id[split:])) {
		return fmt.Errorf("%w: key", ErrBadPartial)
	}
	if e.merging == nil {
		e.merging = e.agg.newOwnPane()
	}
	src := e.merging
	e.agg.clear(src.pane)
	e.seq++ // the group's arrival: after every record in the pane, before every later one
	if err := e.agg.readPartial(&r, src.pane, e.seq); err != nil {
		return err
	}
	if len(r.B) != 0 {
		return fmt.Errorf("%w: %d bytes left over", ErrBadPartial, len(r.B))
	}
	ki, k := e.keyByID(partition, string(id), int(split))
	pi := e.paneOf(ki, k, start, e.firstStart(start), e.lastStart(start))
	e.agg.merge(e.pool.view(pi), src.pane)
	e.markPane(pi, ki)
	if e.fifo {
		e.fifoMerge(ki, start, src.pane)
	}
	return nil
}

// readPartial reads a partial's count and slots (Folds.Append's) into p,
// empty, its picks arriving as seq.
func (l *layout) readPartial(r *wire.Reader, p pane, seq uint64) error {
	n := r.Uvarint()
	if n == 0 || n > math.MaxInt64 {
		return fmt.Errorf("%w: count", ErrBadPartial)
	}
	*p.count = int64(n)
	for i := range p.nums {
		p.nums[i] = r.Float64()
	}
	if p.ext != nil {
		for i := range p.ext.picks {
			pk := &p.ext.picks[i]
			switch r.Byte() {
			case 0:
				*pk = pick{}
				continue
			case 1:
			default:
				r.Fail()
			}
			*pk = pick{t: r.Varint(), seq: seq, has: true}
			switch r.Byte() {
			case 0:
			case 1:
				pk.v.Num, pk.v.IsNum = r.Float64(), true
			default:
				r.Fail()
			}
			pk.v.Str, pk.v.Raw = string(r.Counted()), string(r.Counted())
		}
		for _, s := range p.ext.sets {
			for range r.Count() {
				s[string(r.Counted())] = struct{}{}
			}
		}
		for i := range p.ext.sketches {
			if err := l.readQuantile(r, p.ext, i); err != nil {
				return err
			}
		}
		for _, m := range p.ext.tops {
			for range r.Count() {
				x := string(r.Counted())
				m[x] += int64(r.Uvarint())
			}
		}
	}
	if r.Bad() {
		return fmt.Errorf("%w: aggregates", ErrBadPartial)
	}
	return nil
}

// readQuantile reads quantile slot i of a partial into x, empty: its
// exact values, or its sketch's bins.
func (l *layout) readQuantile(r *wire.Reader, x *paneExt, i int) error {
	switch r.Byte() {
	case 0:
		n := r.Count()
		if n > exactValues {
			return fmt.Errorf("%w: %d exact quantile values", ErrBadPartial, n)
		}
		for range n {
			l.addQuantile(x, i, r.Float64())
		}
		return nil
	case 1:
		sk, err := ddsketch.DecodeDDSketch(r.Counted(), store.SparseStoreConstructor, l.mapping)
		if err != nil || !validSketch(sk) {
			return fmt.Errorf("%w: quantile sketch", ErrBadPartial)
		}
		l.spill(x, i)
		return x.sketches[i].MergeWith(sk)
	}
	r.Fail()
	return nil
}

// validSketch reports whether every bin of sk is one its mapping can make,
// with a positive finite count (a corrupt index must not make a dense
// store allocate a page per index in between).
func validSketch(sk *ddsketch.DDSketch) bool {
	m := sk.IndexMapping
	lo, hi := m.Index(m.MinIndexableValue()), m.Index(m.MaxIndexableValue())
	good := func(c float64) bool { return c > 0 && !math.IsInf(c, 0) }
	ok := sk.GetZeroCount() == 0 || good(sk.GetZeroCount())
	for _, st := range []store.Store{sk.GetPositiveValueStore(), sk.GetNegativeValueStore()} {
		st.ForEach(func(index int, count float64) bool {
			ok = ok && index >= lo && index <= hi && good(count)
			return !ok
		})
	}
	return ok
}

// fifoMerge keeps key ki's fifoAgg right after src was merged into the
// pane that starts at paneStart (fifoNote for a partial).
func (e *Engine) fifoMerge(ki int32, paneStart int64, src pane) {
	f := e.slideOf(ki).fifo
	if f == nil || !f.valid || paneStart < f.lo || paneStart >= f.hi {
		return
	}
	if paneStart >= f.mid {
		e.agg.merge(f.back.pane, src)
		return
	}
	n, ok := slices.BinarySearch(f.starts[f.head:], paneStart)
	if !ok {
		f.valid = false
		return
	}
	for i := f.head; i <= f.head+n; i++ {
		e.mergeFlatInto(&f.counts[i], e.flatNums(f, i), e.flatPicks(f, i), *src.count, src.nums, panePicks(src))
	}
}
