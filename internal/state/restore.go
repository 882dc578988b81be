package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"aggregator/internal/windowing"
)

// A Restorer rebuilds one changelog partition's state from its records,
// given in log order from the start, at any pace: Add takes them (all at
// once for a restore; a standby copy adds what it tails, again and again),
// Finish or FinishGenerations ends it (docs/design.md, "Restore").
//
// What it keeps of each key is its latest committed record and the records
// after it (a commit whose position has not been read yet), in an arena
// of chunks (arena.go) and an index of 8 bytes a key: no string, map entry
// or allocation per record. A record a committed one supersedes is dropped
// at once, and the arena is compacted when the dropped bytes outweigh the
// kept ones.
type Restorer struct {
	// slices holds every record but sliding windows' revisions, which
	// windows holds: Finish hands a key's windows over after its slices.
	slices, windows arena
	// genKeys are the generation records' keys, distinct, in the order
	// first seen (few: one per generation the partition ever held).
	genKeys []string

	pos     Position
	posTag  uint64
	hasPos  bool
	seenPos bool // a position was taken: records tagged posTag or below come from a stale writer
	// owners are the last position taken of each owner (each epoch) in
	// log order: a record is committed by a later position of its own
	// owner only.
	owners  []uint64
	maxTag  uint64
	records int
	stale   int
	// staleKeys are the keys a stale writer wrote: the next commit writes
	// their committed value (or a tombstone) again after its records, so
	// that compaction cannot keep a stale record as the key's last.
	staleKeys map[string]bool
	// pending are the records not committed when added, until a position
	// commits them; orphans are those no later position can commit (an
	// older owner's, once a later owner's position was taken). Finish
	// repairs the keys of those left.
	pending, orphans []recordRef
	// draining: the Restorer hands its committed entries over as they
	// commit (NewDraining, Drain); fresh are the records committed since
	// the last Drain, in log order.
	draining bool
	handed   bool // Drain handed an entry over: FinishDrained ends it
	fresh    []recordRef
	// gens caches Generations until the next Add.
	gens        []Generation
	gensErr     error
	hasGens     bool
	spent       bool // Finish ran: the arenas are gone
	compactions int
}

// recordRef names a record of one of a Restorer's arenas.
type recordRef struct {
	windows bool
	ref     ref
}

// Epoch is the owner part of a tag: its high 32 bits. Each restore
// starts an epoch of its own (Result.NextTag), above every epoch in the
// changelog; the low 32 bits count its commits.
func Epoch(tag uint64) uint32 { return uint32(tag >> 32) }

// committed reports whether the record tagged tag is committed by a
// position taken so far: one of its own owner's (epoch), tagged at or
// above it. A record tagged 0 is (as before positions had tags).
func (r *Restorer) committed(tag uint64) bool {
	e := Epoch(tag)
	for i := len(r.owners) - 1; i >= 0; i-- {
		switch pe := Epoch(r.owners[i]); {
		case pe == e:
			return tag <= r.owners[i]
		case pe < e:
			return tag == 0
		}
	}
	return tag == 0
}

// NextOwner returns the first tag of the owner after the one that wrote
// tag: the first of the next epoch (in the last epoch, the next tag).
func NextOwner(tag uint64) uint64 {
	if e := Epoch(tag); e < math.MaxUint32 {
		return uint64(e+1) << 32
	}
	return tag + 1
}

// NewRestorer returns an empty Restorer.
func NewRestorer() *Restorer {
	r := &Restorer{}
	r.slices.init()
	r.windows.init()
	return r
}

// Records returns how many records Add was given.
func (r *Restorer) Records() int { return r.records }

// Keys returns how many changelog keys of slices, sessions and count
// slices it holds (with a few of positions and generations): a bound on
// the keys of windows its entries make, which a restore reserves room
// for at once (windowing.Operator.Reserve).
func (r *Restorer) Keys() int { return r.slices.keys }

// Bytes returns the memory the Restorer holds: its arenas and indexes.
func (r *Restorer) Bytes() int64 { return r.slices.size() + r.windows.size() }

func (r *Restorer) arena(windows bool) *arena {
	if windows {
		return &r.windows
	}
	return &r.slices
}

// Add takes the next record of the changelog partition; tag is the value
// of its TagHeader header (nil if it has none). The Restorer copies what
// it keeps.
func (r *Restorer) Add(key, value, tag []byte) error {
	if r.spent {
		return errSpent
	}
	r.records++
	r.hasGens = false
	k, err := decodeKey(key)
	if err != nil {
		return err
	}
	var t uint64
	switch {
	case value != nil:
		rd := reader{b: value}
		if t = rd.header(); rd.err != nil {
			return fmt.Errorf("key %q: %w", key, rd.err)
		}
	case len(tag) == 8:
		t = binary.BigEndian.Uint64(tag)
	case tag != nil:
		return fmt.Errorf("%w: key %q: tombstone tag of %d bytes", ErrCorrupt, key, len(tag))
	}
	r.maxTag = max(r.maxTag, t)
	if k.kind == kindPosition {
		if value == nil {
			r.hasPos = false
			return nil
		}
		p, pt, err := decodePosition(value)
		if err != nil {
			return fmt.Errorf("position: %w", err)
		}
		if r.seenPos && pt <= r.posTag || Epoch(pt) < Epoch(r.maxTag) {
			// A writer that had not read the last position, or that
			// writes after a later owner (a later epoch) wrote: a
			// zombie, an instance that kept writing after it lost the
			// partition (see Stale). It does not move the partition
			// back, nor commit its records.
			r.stale++
			return nil
		}
		if n := len(r.owners); n > 0 && Epoch(r.owners[n-1]) == Epoch(pt) {
			r.owners[n-1] = pt
		} else {
			r.owners = append(r.owners, pt)
		}
		r.pos, r.posTag, r.hasPos, r.seenPos = p, pt, true, true
		r.settle(pt)
		return nil
	}
	if r.seenPos && t <= r.posTag {
		// The owner that wrote the last position tags every later record
		// above it (the next commit's tag, or a restore's NextTag):
		// this one is a stale writer's.
		r.stale++
		if r.staleKeys == nil {
			r.staleKeys = map[string]bool{}
		}
		r.staleKeys[string(key)] = true
		return nil
	}
	if r.staleKeys != nil {
		delete(r.staleKeys, string(key)) // written again after: the repair, or a later change
	}
	windows := k.kind == kindWindow
	a := r.arena(windows)
	at := a.put(key, value, t)
	if k.kind == kindGeneration && !slices.Contains(r.genKeys, string(key)) {
		r.genKeys = append(r.genKeys, string(key))
	}
	if r.committed(t) {
		a.cutBefore(at)
		r.noteFresh(windows, at)
	} else {
		r.pending = append(r.pending, recordRef{windows, at})
	}
	if a.wasteful() {
		r.compact(windows)
	}
	return nil
}

// errSpent is returned by a Restorer that Finish has run on.
var errSpent = errors.New("restorer: used after Finish")

// settle is called with each position taken, tagged pt: the pending
// records it commits drop what they supersede; those of an older owner
// can no longer be committed.
func (r *Restorer) settle(pt uint64) {
	keep := r.pending[:0]
	for _, p := range r.pending {
		a := r.arena(p.windows)
		if a.dead(p.ref) {
			continue
		}
		switch t := a.tag(p.ref); {
		case r.committed(t):
			a.cutBefore(p.ref)
			r.noteFresh(p.windows, p.ref)
		case Epoch(t) < Epoch(pt):
			r.orphans = append(r.orphans, p)
		default:
			keep = append(keep, p)
		}
	}
	clear(r.pending[len(keep):])
	r.pending = keep
}

// compact copies the kept records of one arena into a new one.
func (r *Restorer) compact(windows bool) {
	r.compactions++
	a := r.arena(windows)
	moved := map[ref]ref{} // the pending and orphaned records' refs
	for _, p := range slices.Concat(r.pending, r.orphans, r.fresh) {
		if p.windows == windows {
			moved[p.ref] = noRef
		}
	}
	a.compact(moved, func(at ref) bool {
		// A key whose only record is a committed tombstone restores as
		// one never written: it is left out (unless a stale writer's
		// record of it waits for its repair, or Drain has yet to hand
		// the deletion over).
		key := a.key(at)
		handed := !r.draining || a.drained(at) || key[1] == kindGeneration
		return a.tombstone(at) && r.committed(a.tag(at)) && !r.staleKeys[view(key)] && handed
	})
	keep := func(rs []recordRef) []recordRef {
		out := rs[:0]
		for _, p := range rs {
			if p.windows == windows {
				if p.ref = moved[p.ref]; p.ref == noRef {
					continue // dead: superseded since it was added
				}
			}
			out = append(out, p)
		}
		return out
	}
	r.pending, r.orphans, r.fresh = keep(r.pending), keep(r.orphans), keep(r.fresh)
}

// noteFresh notes a record that a position commits, for Drain.
func (r *Restorer) noteFresh(windows bool, at ref) {
	if r.draining {
		r.fresh = append(r.fresh, recordRef{windows, at})
	}
}

// Position returns the partition's position so far, and whether it has one.
func (r *Restorer) Position() (Position, bool) { return r.pos, r.hasPos }

// Result is a restored partition.
type Result struct {
	// Generations are the partition's live generations, by version
	// (docs/design.md#generations-in-the-changelog): none for an empty partition; one of unknown settings
	// (Generation.Known false) for a changelog written before generations.
	Generations []Generation
	Position    Position // where input resumes; meaningful when HasPosition
	HasPosition bool
	// NextTag is the tag the partition's next commit must use: the first
	// of a new epoch (Epoch), above every epoch in the changelog, so that
	// records of a commit cut short stay out, and so do those of a stale
	// writer, however its tags and the new owner's interleave.
	NextTag uint64
	// Repairs are records to write in the next commit (tagged NextTag)
	// because the changelog's latest record for their key belongs to a
	// commit cut short: each restores the key's committed value or deletes it.
	Repairs []Repair
	Entries int // entries handed to the engine
	// Stale counts the records left out because a stale writer wrote
	// them: tagged at or below a position already written, so by an
	// instance that had not read that position (with at_least_once, a
	// zombie: paused past its session, it finishes the commit it had in
	// hand after the partition's next owner committed). The owner's
	// state wins, key by key; the keys the zombie wrote are repaired.
	// The next commit must write a position (a zombie's position may be
	// the last one in the log).
	Stale int
	// Spent counts the slices the caller left out because every window
	// of theirs was cleaned up before the position (windowing.ErrSpent):
	// a stale writer's records that a restore cannot tell from the
	// owner's (docs/delivery.md: a zombie's commit landing whole between
	// the new owner's restore and its first write). The caller deletes
	// them with the next commit. Finish leaves it 0.
	Spent int
}

// A Repair is a changelog record to write again; Value nil is a tombstone.
type Repair struct{ Key, Value []byte }

// Finish is FinishGenerations for a partition of one generation (or
// none): it refuses a changelog partition that holds more.
func (r *Restorer) Finish(fn func(*windowing.Entry) error) (Result, error) {
	if gens, err := r.Generations(); err == nil && len(gens) > 1 {
		return Result{}, fmt.Errorf("%w: the partition holds %d generations of windows; this release restores one", ErrGenerations, len(gens))
	}
	return r.FinishGenerations(func(_ int64, en *windowing.Entry) error { return fn(en) })
}

// ErrGenerations is wrapped by Finish's error for a changelog partition
// that holds more than one generation (written by a later release).
var ErrGenerations = errors.New("several generations")

// Generations returns the partition's live generations as the records so
// far hold them, by version (the ones FinishGenerations returns): the
// core decides from them, before the entries are handed over, which
// operator each generation restores into. A key's record counts here if
// it is the key's last tagged at or below the last position's tag.
func (r *Restorer) Generations() ([]Generation, error) {
	if r.hasGens {
		return r.gens, r.gensErr
	}
	if r.spent {
		return nil, errSpent
	}
	r.gens, r.gensErr = r.generations()
	r.hasGens = true
	return r.gens, r.gensErr
}

func (r *Restorer) generations() ([]Generation, error) {
	var stored []Generation
	for _, key := range r.genKeys {
		at, ok := r.atPosition(&r.slices, r.slices.find([]byte(key)))
		if !ok || r.slices.tombstone(at) {
			continue
		}
		k, err := decodeKey([]byte(key))
		if err != nil {
			return nil, err
		}
		g, err := decodeGeneration(k, r.slices.value(at))
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
		stored = append(stored, g)
	}
	legacyEntries, entryGens := false, map[int64]bool{}
	for _, a := range []*arena{&r.slices, &r.windows} {
		err := a.each(func(rec *kept) error {
			if rec.flags&(flagDead|flagTombstone) != 0 || rec.tag > r.posTag {
				return nil
			}
			key := rec.key
			if key[1] == kindGeneration {
				return nil
			}
			if rec.flags&flagFollowed != 0 { // not the key's last record: the last at or below the position may be a later one
				if last, ok := r.atPosition(a, a.find(key)); !ok || last != rec.at {
					return nil
				}
			}
			k, err := decodeKey(key)
			switch {
			case err != nil:
				return err
			case k.hasGen:
				entryGens[k.gen] = true
			default:
				legacyEntries = true
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return generations(stored, legacyEntries, entryGens)
}

// atPosition returns the last record of the chain that ends at last
// tagged at or below the last position's tag.
func (r *Restorer) atPosition(a *arena, last ref) (ref, bool) {
	for at := last; at != noRef; at = a.prev(at) {
		if a.tag(at) <= r.posTag {
			return at, true
		}
	}
	return noRef, false
}

// FinishGenerations hands fn the partition's committed entries, each with
// its generation's version, every slice (or session, or count slice)
// first, then every sliding window, and returns the partition's
// generations in Result.Generations. The *Entry, its ID and its slices
// are lent to fn for the call only (the operators copy what they keep).
// The Restorer's memory is freed as it goes: it is spent after, whatever
// fn returns.
func (r *Restorer) FinishGenerations(fn func(gen int64, en *windowing.Entry) error) (Result, error) {
	res := Result{Position: r.pos, HasPosition: r.hasPos, NextTag: NextOwner(max(r.maxTag, r.posTag)), Stale: r.stale}
	gens, err := r.Generations()
	if err != nil {
		return Result{}, err
	}
	res.Generations = gens
	legacyGen := int64(0)
	for _, g := range gens {
		if g.LegacyKeys {
			legacyGen = g.Version
		}
	}
	if r.handed {
		return Result{}, errDraining
	}
	if res.Repairs, err = r.repairs(res.NextTag, nil); err != nil {
		return Result{}, err
	}
	r.spent = true
	var en windowing.Entry
	for _, a := range []*arena{&r.slices, &r.windows} {
		err := a.drain(func(rec *kept) error {
			if rec.flags&(flagDead|flagTombstone) != 0 || !r.committed(rec.tag) {
				return nil // superseded, deleted, or of a commit cut short
			}
			key := rec.key
			if key[1] == kindGeneration {
				return nil
			}
			if err := decode(key, rec.value, &en); err != nil {
				return err
			}
			gen := legacyGen
			if key[0] == keyGenerations {
				gen = int64(binary.BigEndian.Uint64(key[6:14]) ^ 1<<63)
			}
			res.Entries++
			return fn(gen, &en)
		})
		if err != nil {
			r.slices.free()
			r.windows.free()
			return Result{}, err
		}
	}
	return res, nil
}

// repairs returns the records the next commit (tagged next) writes again,
// by key: those of the keys whose latest record is not committed (a
// commit cut short, a stale writer's records after the owner's) and
// those a stale writer wrote. committed returns the committed value of a
// key whose record Drain handed over, nil if the built state left it out
// (committed is nil for a Restorer never drained).
func (r *Restorer) repairs(next uint64, committed func(key []byte) ([]byte, error)) ([]Repair, error) {
	var out []Repair
	done := map[string]bool{}
	repair := func(a *arena, key []byte, last ref) error {
		done[string(key)] = true
		chosen := last
		for chosen != noRef && !r.committed(a.tag(chosen)) {
			chosen = a.prev(chosen)
		}
		if chosen == last && last != noRef && !r.staleKeys[string(key)] {
			return nil
		}
		rep := Repair{Key: bytes.Clone(key)}
		switch {
		case chosen == noRef || a.tombstone(chosen):
		case a.flags(chosen)&flagBare != 0:
			v, err := committed(key)
			if err != nil {
				return fmt.Errorf("repair of key %q: %w", key, err)
			}
			if v != nil { // else the built state left it out: deleted
				rep.Value = retag(v, next)
			}
		default:
			rep.Value = retag(a.value(chosen), next)
		}
		out = append(out, rep)
		return nil
	}
	for _, p := range slices.Concat(r.pending, r.orphans) {
		a := r.arena(p.windows)
		if key := a.key(p.ref); !a.dead(p.ref) && !done[string(key)] {
			if err := repair(a, key, a.find(key)); err != nil {
				return nil, err
			}
		}
	}
	for key := range r.staleKeys {
		if !done[key] {
			a := r.arena(key[1] == kindWindow)
			if err := repair(a, []byte(key), a.find([]byte(key))); err != nil {
				return nil, err
			}
		}
	}
	slices.SortFunc(out, func(a, b Repair) int { return bytes.Compare(a.Key, b.Key) })
	return out, nil
}

// decode fills en from a slice or window record, reusing en's memory (see
// decodeEntry); en.ID is a view of key.
func decode(key, value []byte, en *windowing.Entry) error {
	if err := decodeID(key, en); err != nil {
		return err
	}
	if _, err := decodeEntry(value, en); err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	return nil
}

// decodeID fills en's identity from a slice or window record's key, and
// empties the rest (keeping its memory); en.ID is a view of key.
func decodeID(key []byte, en *windowing.Entry) error {
	k, err := decodeKey(key)
	if err != nil {
		return err
	}
	// Field by field: the slices keep their memory.
	en.Kind, en.Partition, en.ID, en.Split, en.Start = windowing.SliceEntry, k.partition, k.id, k.split, k.start
	en.End, en.Deleted, en.Revision, en.EarlyOnly, en.Changed, en.Count, en.Lo, en.Hi, en.First = 0, false, 0, false, false, 0, 0, 0, 0
	en.Nums, en.Picks, en.Sets, en.Sketches, en.Exact, en.Tops = en.Nums[:0], en.Picks[:0], en.Sets[:0], en.Sketches[:0], en.Exact[:0], en.Tops[:0]
	switch k.kind {
	case kindWindow:
		en.Kind = windowing.WindowEntry
	case kindSession:
		en.Kind = windowing.SessionEntry
	case kindCount:
		en.Kind = windowing.CountEntry
	}
	return nil
}

// retag returns value with its tag replaced.
func retag(value []byte, tag uint64) []byte {
	rd := reader{b: value}
	rd.header()
	out := binary.AppendUvarint([]byte{version}, tag)
	return append(out, rd.b...)
}
