package windowing

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"

	"github.com/DataDog/sketches-go/ddsketch"

	"aggregator/internal/record"
)

// EntryKind says what an Entry holds.
type EntryKind uint8

const (
	// SliceEntry is one key's pane: its accumulators and, for tumbling
	// windows (a window is its one pane), the window's revision.
	SliceEntry EntryKind = iota + 1
	// WindowEntry is the revision of one key's sliding window that has
	// fired. A window that has not fired needs no entry: its panes make it.
	WindowEntry
	// SessionEntry is one key's session: its bounds (Start, End), its
	// accumulators and its revision.
	SessionEntry
	// CountEntry is a key's count window state: without a slide, its one
	// entry (Start 0; Revision the open window's index; its records, if
	// any); with one, a slice of gcd(size, slide) records (Start its index).
	CountEntry
)

// Entry is one item of a partition's window state as a changelog keeps
// it: Changes hands out what changed, Restore takes it back. (Kind,
// Partition, ID, Start) identify it.
type Entry struct {
	Kind      EntryKind
	Partition int32
	ID        string // the group key, opaque: its sort key (ID[:Split]) then its JSON
	Split     int
	Start     int64
	End       int64 // SessionEntry only: the session is [Start, End)
	Deleted   bool  // a tombstone: the slice or window was dropped
	Revision  int64 // firings so far (WindowEntry; tumbling SliceEntry)
	// EarlyOnly: every one of the Revision firings was early, so the
	// window has not been due yet and will fire on time.
	EarlyOnly bool
	// Changed (SliceEntry, SessionEntry): the slice or session took
	// records since the last early-firing tick, which fires every window
	// that changed: the next one fires the windows it is in.
	Changed bool
	// SliceEntry: the accumulators, one slot per configured aggregate kind
	// (see layout). Changes lends them: valid during the call only. Nums
	// ends with the value counters of sum, avg and count(field); an entry
	// written before they existed has none, and restores with each
	// counter at Count (every record had every field then). A Pick of
	// no value has the null Value.
	Count    int64
	Nums     []float64
	Picks    []Pick
	Sets     []map[string]struct{}
	Sketches []*ddsketch.DDSketch
	// Exact holds each quantile's values while they are few enough to be
	// exact (one per sketch; its sketch is then empty). An entry written
	// before exact quantiles has none: its sketches hold every value.
	Exact [][]float64
	Tops  []map[string]int64 // top_k: count per value, keys opaque (see topKey)
	// CountEntry: the smallest and largest event time of the records, and
	// the first record's.
	Lo, Hi, First int64
}

// Pick is a first/last aggregate's candidate: its value, event time and
// arrival number (which breaks ties of event time).
type Pick struct {
	Value record.Value
	Time  int64
	Seq   uint64
}

// Changelog flags of a pane (paneHdr.flags) or sliding window (win.flags).
const (
	flagDirty  uint8 = 1 << iota // changed since the last Changes
	flagStored                   // Changes has handed it out: dropping it needs a tombstone
	// flagFired: the window has fired other than early (on time, late or
	// final), so it has been due; its revision alone does not say, as
	// early firings count too.
	flagFired
	// flagChanged: the window took a record since its last firing, so an
	// early-firing tick fires it (see early.go).
	flagChanged
)

// changes is what the changelog lacks since the last Changes call.
type changes struct {
	panes []paneRef // panes marked dirty, oldest first; stale entries are skipped
	wins  []winRef  // sliding windows marked dirty
	gone  []goneRef // stored slices and windows dropped since
	// en is the entry Changes lends its fn, reused: a local one escapes
	// to the heap at every call (fn is a func value), an allocation per
	// operator per commit.
	en Entry
}

type paneRef struct{ pane, key int32 }

type winRef struct {
	key   int32
	start int64
}

type goneRef struct {
	kind  EntryKind
	part  int32
	id    string
	split uint32
	start int64
}

// TrackChanges makes e note what changes from now on, for Changes. An
// engine that is never checkpointed (replay) does not track: the notes
// would pile up.
func (e *Engine) TrackChanges() { e.track = true }

// markPane notes that pane i (of key ki) changed.
func (e *Engine) markPane(i, ki int32) {
	if e.track {
		e.changes.markPane(&e.pool, i, ki)
	}
}

// markPane notes that pane i of pool p (of key ki) changed.
func (c *changes) markPane(p *panePool, i, ki int32) {
	if h := p.hdr(i); h.flags&flagDirty == 0 {
		h.flags |= flagDirty
		c.panes = append(c.panes, paneRef{i, ki})
	}
}

// markWin notes that key ki's sliding window w changed revision.
func (e *Engine) markWin(ki int32, w *win) {
	if e.track && w.flags&flagDirty == 0 {
		w.flags |= flagDirty
		e.changes.wins = append(e.changes.wins, winRef{ki, w.start})
	}
}

// dropped notes that k's slice or window at start, with flags, is gone.
func (e *Engine) dropped(kind EntryKind, k *keyState, start int64, flags uint8) {
	if flags&flagStored != 0 {
		e.changes.gone = append(e.changes.gone, goneRef{kind, k.part, k.id, k.split, start})
	}
}

// forgetPartition drops what partition p's changelog lacks from c, the
// changes of an operator whose keys are keys: p is leaving.
func forgetPartition[E any](c *changes, keys *keySlab[E], p int32) {
	// The newest entry of a live dirty pane names its key; older entries
	// may name a key the pane no longer has, and are skipped by its flags
	// anyway. Freeing p's panes clears their flags.
	c.panes = slices.DeleteFunc(c.panes, func(r paneRef) bool { return keys.at(r.key).part == p })
	c.wins = slices.DeleteFunc(c.wins, func(r winRef) bool { return keys.at(r.key).part == p })
	c.gone = slices.DeleteFunc(c.gone, func(g goneRef) bool { return g.part == p })
}

// takeDirty yields, newest first, the noted panes still dirty in pool p,
// marking each stored and no longer dirty; then it forgets the notes. A
// pane freed and reused since an older note has its flags cleared, so
// only its newest note counts.
func (c *changes) takeDirty(p *panePool) iter.Seq[paneRef] {
	return func(yield func(paneRef) bool) {
		for i := len(c.panes) - 1; i >= 0; i-- {
			r := c.panes[i]
			h := p.hdr(r.pane)
			if h.flags&flagDirty == 0 {
				continue
			}
			h.flags = h.flags&^flagDirty | flagStored
			if !yield(r) {
				return
			}
		}
		c.panes = c.panes[:0]
	}
}

// Changes hands fn every entry that changed since the last call, for the
// changelog: tombstones of stored entries that were dropped, then slices
// and windows that changed. The *Entry is valid during the call only.
func (e *Engine) Changes(fn func(*Entry)) {
	c := &e.changes
	en := &c.en
	c.handOutGone(fn, nil)
	for r := range c.takeDirty(&e.pool) {
		e.sliceEntry(en, e.keys.at(r.key), r.pane)
		fn(en)
	}
	for i := len(c.wins) - 1; i >= 0; i-- {
		r := c.wins[i]
		k := e.keys.at(r.key)
		if k.id == "" {
			continue
		}
		sk := e.slideOf(r.key)
		j, ok := sk.findWin(r.start, e.slide)
		if !ok {
			continue
		}
		w := &sk.wins.live()[j]
		if w.flags&flagDirty == 0 {
			continue
		}
		w.flags = w.flags&^flagDirty | flagStored
		*en = Entry{Kind: WindowEntry, Partition: k.part, ID: k.id, Split: int(k.split), Start: w.start, Revision: int64(w.rev),
			EarlyOnly: w.rev > 0 && w.flags&flagFired == 0}
		fn(en)
	}
	c.wins = c.wins[:0]
}

// handOutGone hands fn the tombstones noted since the last call, except
// those whose identity is in live, and forgets them.
func (c *changes) handOutGone(fn func(*Entry), live map[sessionID]bool) {
	en := &c.en
	for _, g := range c.gone {
		if live[sessionID{g.part, g.id, g.start}] {
			continue
		}
		*en = Entry{Kind: g.kind, Partition: g.part, ID: g.id, Split: int(g.split), Start: g.start, Deleted: true}
		fn(en)
	}
	clear(c.gone)
	c.gone = c.gone[:0]
}

// sliceEntry fills en with pane i of key k.
func (e *Engine) sliceEntry(en *Entry, k *keyState, i int32) {
	e.pool.entry(en, SliceEntry, k, i)
	if !e.tumbling {
		en.Revision, en.EarlyOnly = 0, false
	}
}

// entry fills en with pane i of key k, as an entry of kind kind.
func (p *panePool) entry(en *Entry, kind EntryKind, k *keyState, i int32) {
	h := p.hdr(i)
	v := p.view(i)
	picks := en.Picks[:0]
	*en = Entry{Kind: kind, Partition: k.part, ID: k.id, Split: int(k.split), Start: h.start,
		Count: h.count, Revision: int64(h.rev), EarlyOnly: h.rev > 0 && h.flags&flagFired == 0, Nums: v.nums}
	en.Changed = h.flags&flagChanged != 0
	if v.ext != nil {
		for _, pk := range v.ext.picks {
			if !pk.has {
				pk.v = record.NullValue
			}
			picks = append(picks, Pick{Value: pk.v, Time: pk.t, Seq: pk.seq})
		}
		en.Picks, en.Sets, en.Sketches, en.Exact, en.Tops = picks, v.ext.sets, v.ext.sketches, v.ext.exact, v.ext.tops
	}
}

// ErrSpent is wrapped by the error Restore returns for a slice every
// window of which was cleaned up at or before dropped: a slice the engine
// would have deleted already (a stale writer's record, at_least_once: a
// zombie's). Nothing it holds can reach a result; the caller may leave it
// out.
var ErrSpent = errors.New("every window of the slice is cleaned up")

// Restore adds one entry of a partition's state, as Changes handed it
// out (a changelog's latest entry per identity, tombstones left out):
// every SliceEntry of the partition first (in any order), then its
// WindowEntries; en is lent (Operator.Restore). The
// partition must have no state in e (new, or removed). Call
// FinishRestore after the last entry. Windows whose cleanup time is at or
// below dropped (the previous owner's watermark) were dropped there and
// are not made again.
func (e *Engine) Restore(en *Entry, dropped int64) error {
	if ok, err := restorable(en); !ok {
		return err
	}
	if e.pastLateness(en, dropped) {
		return nil
	}
	ki, k := e.keyByID(en.Partition, en.ID, en.Split)
	switch en.Kind {
	case SliceEntry:
		return e.restoreSlice(ki, k, en, dropped, false)
	case WindowEntry:
		return e.restoreWindow(ki, k, en)
	case SessionEntry:
		return fmt.Errorf("restore: session [%d, %d) of %s does not fit a tumbling or sliding window (was the window changed?)", en.Start, en.End, en.ID[en.Split:])
	}
	return fmt.Errorf("restore: unknown entry kind %d", en.Kind)
}

// pastLateness reports whether en is a slice every window of which, or a
// sliding window whose cleanup time, is at or below dropped, under this
// engine's allowed_lateness: a lateness lowered since the entry was
// written (a run setting, docs/changing-config.md#three-kinds-of-key) drops it as the previous owner would
// have, had the lower lateness been in force. It is already dropped: it
// is not restored, fires nothing, and its tombstone goes in the next
// commit (when the engine tracks its changes), so compaction removes it.
func (e *Engine) pastLateness(en *Entry, dropped int64) bool {
	var last int64
	switch en.Kind {
	case SliceEntry:
		if e.paneStart(en.Start) != en.Start {
			return false // restoreSlice says what is wrong with it
		}
		last = e.lastStart(en.Start)
		if last >= e.until {
			return false // the generation's bounds: restoreSlice decides
		}
	case WindowEntry:
		if e.tumbling {
			return false
		}
		last = en.Start
	default:
		return false
	}
	if e.cleanupTime(last) > dropped {
		return false
	}
	if e.track {
		e.changes.gone = append(e.changes.gone, goneRef{en.Kind, en.Partition, strings.Clone(en.ID), uint32(en.Split), en.Start})
	}
	return true
}

// restorable reports whether Restore takes en (a tombstone it skips), and
// returns an error if en's ID does not hold a group key.
func restorable(en *Entry) (bool, error) {
	if en.Deleted {
		return false, nil
	}
	if en.Split < 0 || en.Split > len(en.ID) || !looksLikeKey(en.ID[en.Split:]) {
		return false, fmt.Errorf("restore: malformed key %q", en.ID)
	}
	return true, nil
}

// looksLikeKey reports whether key looks like a group key's JSON object.
func looksLikeKey(key string) bool { return len(key) >= 2 && key[0] == '{' && key[len(key)-1] == '}' }

// restoreSlice restores a slice; replace: one held already is replaced
// (Update), not refused.
func (e *Engine) restoreSlice(ki int32, k *keyState, en *Entry, dropped int64, replace bool) error {
	if err := e.agg.checkSlots(en, "slice"); err != nil {
		return err
	}
	if en.Revision < 0 || en.Revision > math.MaxInt32 {
		return fmt.Errorf("restore: slice at %d of %s has revision %d", en.Start, en.ID[en.Split:], en.Revision)
	}
	if got := e.paneStart(en.Start); got != en.Start {
		return fmt.Errorf("restore: slice at %d of %s is not on a slice boundary (was the window changed?)", en.Start, en.ID[en.Split:])
	}
	first, last := e.firstStart(en.Start), e.lastStart(en.Start)
	if first < e.from || last >= e.until { // a generation's bounds (docs/design.md#generations-in-the-window-operators): CutOver comes before Restore
		first, last = e.bounded(first, last)
	}
	for first <= last && e.cleanupTime(first) <= dropped {
		first += e.slide
	}
	if first > last {
		return fmt.Errorf("restore: slice at %d of %s has no open window: %w", en.Start, en.ID[en.Split:], ErrSpent)
	}
	pi := e.paneOf(ki, k, en.Start, first, last)
	h := e.pool.hdr(pi)
	noted := h.flags & flagChanged // replace: its early-firing note stands
	switch {
	case replace:
		e.agg.clear(e.pool.view(pi))
		if !e.tumbling && e.slideOf(ki).fifo != nil {
			e.slideOf(ki).fifo.valid = false
		}
	case h.count != 0:
		return fmt.Errorf("restore: slice at %d of %s twice", en.Start, en.ID[en.Split:])
	}
	h.flags = flagStored | firedFlag(en)
	if replace && en.Changed {
		h.flags |= noted
	}
	seq, err := e.pool.load(&e.agg, pi, en)
	if err != nil {
		return err
	}
	e.seq = max(e.seq, seq)
	if e.tumbling {
		h.rev = int32(en.Revision)
		e.restored(en.Start, firedFlag(en) != 0)
	} else {
		e.restored(first, false)
	}
	e.restoredChanged(ki, pi, en)
	return nil
}

// paneStart is the start of the pane that holds t.
func (e *Engine) paneStart(t int64) int64 {
	if e.cal != nil {
		return e.cal.Assign(t).Start
	}
	return t - floorMod(t-e.offset, e.paneLen)
}

// firedFlag is flagFired if en's window has fired other than early.
func firedFlag(en *Entry) uint8 {
	if en.Revision > 0 && !en.EarlyOnly {
		return flagFired
	}
	return 0
}

func (e *Engine) restoreWindow(ki int32, k *keyState, en *Entry) error {
	if e.tumbling || en.Revision <= 0 || en.Revision > math.MaxInt32 {
		return fmt.Errorf("restore: window entry at %d of %s (revision %d) does not fit a %s window", en.Start, en.ID[en.Split:], en.Revision, map[bool]string{true: "tumbling", false: "sliding"}[e.tumbling])
	}
	sk := e.slideOf(ki)
	j, ok := sk.findWin(en.Start, e.slide)
	if !ok {
		return fmt.Errorf("restore: window at %d of %s has no slice", en.Start, en.ID[en.Split:])
	}
	w := &sk.wins.live()[j]
	w.rev, w.flags = int32(en.Revision), flagStored|firedFlag(en)
	e.restored(en.Start, firedFlag(en) != 0)
	return nil
}

// restored notes a restored window at start, which has fired (other than
// early) or not.
func (e *Engine) restored(start int64, fired bool) {
	e.restoredMin = min(e.restoredMin, start)
	if fired {
		e.aheadUntil = max(e.aheadUntil, e.maxTimestamp(start))
	}
}

// FinishRestore ends a restore: restored windows already due at the
// current watermark (the owner before had a lower one) fire on time, unless
// they fired before, and those past their cleanup time are dropped (emit
// on_close: with their final firing), as if the watermark had just come
// there.
func (e *Engine) FinishRestore() {
	if e.restoredMin == math.MaxInt64 {
		return
	}
	if !e.onClose {
		i, _ := slices.BinarySearchFunc(e.buckets, e.restoredMin, func(b *bucket, s int64) int { return cmp.Compare(b.start, s) })
		e.fired = min(e.fired, i)
	}
	e.restoredMin = math.MaxInt64
	e.fireDue()
	e.nextDue = e.dueTime()
	if invariants {
		e.check()
	}
}

// fireAhead is Add's late firing while a restored window may have fired
// under a higher watermark than e's: it fires, latest start first, the
// windows starting in [first, last] that are due or have fired before, as
// the previous owner would have.
func (e *Engine) fireAhead(ki int32, k *keyState, first, last, wm int64) {
	for s := last; s >= first; s -= e.slide {
		if e.maxTimestamp(s) <= wm || e.hasFired(ki, k, s) {
			e.emit(ki, k, s, Late)
		}
	}
}

// hasFired reports whether k's window at start has fired other than early.
func (e *Engine) hasFired(ki int32, k *keyState, start int64) bool {
	if e.tumbling {
		return e.pool.hdr(e.findPane(k, start)).flags&flagFired != 0
	}
	sk := e.slideOf(ki)
	j, ok := sk.findWin(start, e.slide)
	if !ok {
		return false
	}
	return sk.wins.live()[j].flags&flagFired != 0
}

// keyByID returns key id of partition part, creating it (with a copy of
// id, which a restore lends) if needed.
func (e *Engine) keyByID(part int32, id string, split int) (int32, *keyState) {
	tag := e.keys.hash(part, id[split:])
	if ki, k := e.keys.find(part, tag, id[split:]); k != nil {
		return ki, &k.keyState
	}
	return e.addKey(part, tag, strings.Clone(id), split)
}

// checkSlots returns an error unless en has the slots of layout l (nums
// without the counters, and no exact values, for an entry written before
// them).
func (l *layout) checkSlots(en *Entry, what string) error {
	nums := len(en.Nums) == l.nums || len(en.Nums) == l.nums-l.counters
	if !nums || len(en.Picks) != l.picks || len(en.Sets) != l.sets || len(en.Sketches) != l.sketches || len(en.Tops) != l.tops ||
		len(en.Exact) != 0 && len(en.Exact) != l.sketches {
		return l.slotsError(en, what, "")
	}
	if err := checkTops(en.Tops); err != nil {
		return fmt.Errorf("restore: %s at %d of %s: %w", what, en.Start, en.ID[en.Split:], err)
	}
	for _, vs := range en.Exact {
		if len(vs) > exactValues {
			return fmt.Errorf("restore: %s at %d of %s: %d exact quantile values, at most %d", what, en.Start, en.ID[en.Split:], len(vs), exactValues)
		}
	}
	return nil
}

// slotsError is the error of an entry whose aggregate slots do not fit l.
func (l *layout) slotsError(en *Entry, what, why string) error {
	return fmt.Errorf("restore: %s at %d of %s has %d/%d/%d/%d/%d aggregate slots, the config needs %d/%d/%d/%d/%d (were the aggregates changed?%s)",
		what, en.Start, en.ID[en.Split:], len(en.Nums), len(en.Picks), len(en.Sets), len(en.Sketches), len(en.Tops), l.nums, l.picks, l.sets, l.sketches, l.tops, why)
}

// Slots checks entries of a changelog that recorded no settings (written
// before generations) against the aggregates of the config that restores
// it.
type Slots struct{ l layout }

// NewSlots returns the Slots of aggs.
func NewSlots(aggs []Aggregate) (Slots, error) {
	l, err := newLayout(aggs)
	return Slots{l}, err
}

// Unrecorded returns the error Restore returns for a slice, session or
// count entry that does not have the aggregate slots of s, value
// counters included (nil for a sliding window's revision, which has
// none). Restore takes an entry without the counters of sum, avg and
// count(field) as one written before they existed; in a changelog that
// recorded its settings, it is. In one that did not, it may as well be
// an entry of other aggregates with as many slots (a sum's value and its
// counter, read as a sum and the max this config adds after it): the
// bytes cannot tell them apart, so it is refused rather than read
// wrong (docs/changing-config.md, "Changelogs written before
// generations").
func (s *Slots) Unrecorded(en *Entry) error {
	l := &s.l
	if en.Kind == WindowEntry || en.Deleted || l.counters == 0 || len(en.Nums) != l.nums-l.counters {
		return nil
	}
	what := map[EntryKind]string{SliceEntry: "slice", SessionEntry: "session", CountEntry: "count slice"}[en.Kind]
	return l.slotsError(en, what, "; it has no value counters, which every entry of sum, avg and count(field) has since the release "+
		"before generations, and the changelog records no settings: it holds other aggregates, or is of a release before value counters")
}

// load copies en's count and accumulators into the empty pane i of layout
// l, and returns the largest arrival number of its picks.
func (p *panePool) load(l *layout, i int32, en *Entry) (uint64, error) {
	p.hdr(i).count = en.Count
	v := p.view(i)
	copy(v.nums, en.Nums)
	for j := len(en.Nums); j < len(v.nums); j++ { // written before value counters: every record had a value
		v.nums[j] = float64(en.Count)
	}
	var seq uint64
	if v.ext == nil {
		return 0, nil
	}
	for j, pk := range en.Picks {
		v.ext.picks[j] = pick{v: pk.Value, t: pk.Time, seq: pk.Seq, has: !pk.Value.Null && en.Count > 0}
		if !v.ext.picks[j].has {
			v.ext.picks[j] = pick{}
		}
		seq = max(seq, pk.Seq)
	}
	for j, set := range en.Sets {
		for x := range set {
			v.ext.sets[j][x] = struct{}{}
		}
	}
	for j, m := range en.Tops {
		for x, n := range m {
			v.ext.tops[j][x] = n
		}
	}
	for j, sk := range en.Sketches {
		if sk == nil {
			return 0, fmt.Errorf("restore: slice at %d of %s: no quantile sketch", en.Start, en.ID[en.Split:])
		}
		if !sk.IndexMapping.Equals(l.mapping) {
			return 0, fmt.Errorf("restore: slice at %d of %s: quantile sketch of another accuracy", en.Start, en.ID[en.Split:])
		}
		if sk.IsEmpty() {
			continue
		}
		l.spill(v.ext, j)
		if err := v.ext.sketches[j].MergeWith(sk); err != nil {
			return 0, fmt.Errorf("restore: slice at %d of %s: quantile sketch: %w", en.Start, en.ID[en.Split:], err)
		}
	}
	for j, vs := range en.Exact {
		for _, x := range vs {
			l.addQuantile(v.ext, j, x)
		}
	}
	return seq, nil
}
