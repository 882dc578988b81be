package state

import (
	"encoding/binary"
	"errors"
	"math"

	"aggregator/internal/windowing"
)

// A built copy of a changelog partition (a standby replica's,
// docs/design.md "Standby state") is window state, not changelog bytes:
// a Restorer made by NewDraining hands each entry over as a position
// commits it (Drain), and keeps of it only its key, its tag and its
// links, what its bookkeeping needs (which keys a commit cut short or a
// stale writer touched must be repaired, which generations hold
// entries). The records not committed yet, the generation records and
// the position it keeps whole, as any Restorer does.
//
// Drains at any points, then FinishDrained, give the entries and the
// Result that one FinishGenerations at the end gives: applied in order,
// the entries Drain hands over (puts, and deletions of what an earlier
// drain put) leave the committed entries of the log so far
// (TestDrainMatchesFinish).

// VersionOne is the generation Drain gives an entry of a version-1 key
// (written before generations, or adopted by the partition's first
// generation: Generation.LegacyKeys), whose generation the key does not
// say: FinishGenerations gives it the generation that holds such keys.
const VersionOne = math.MinInt64

var (
	errDraining    = errors.New("restorer: a Restorer that Drain handed entries from ends with FinishDrained")
	errNotDraining = errors.New("restorer: Drain on a restorer not made by NewDraining")
)

// NewDraining returns an empty Restorer whose committed entries Drain
// hands over as they commit.
func NewDraining() *Restorer {
	r := NewRestorer()
	r.draining = true
	return r
}

// Drain hands fn, every slice (or session, or count slice) first, then
// every sliding window, each entry whose key a position committed a
// record of since the last Drain: the record's entry, or a deletion
// (Entry.Deleted, its identity only) for a tombstone. gen is the entry's
// generation as its key says, VersionOne for a version-1 key. The Entry
// is lent for the call. The Restorer forgets the entries' values. After
// an error the Restorer is spent: the built state no longer matches it.
func (r *Restorer) Drain(fn func(gen int64, en *windowing.Entry) error) error {
	switch {
	case !r.draining:
		return errNotDraining
	case r.spent:
		return errSpent
	}
	var en windowing.Entry
	for _, windows := range []bool{false, true} {
		a := r.arena(windows)
		for _, p := range r.fresh {
			if p.windows != windows || a.dead(p.ref) || a.drained(p.ref) {
				continue
			}
			key, value, _ := a.fields(p.ref)
			if key[1] == kindGeneration {
				continue // Generations reads it
			}
			gen, err := EntryOf(key, &en)
			switch {
			case err != nil:
			case a.tombstone(p.ref):
				en.Deleted = true
			default:
				err = decode(key, value, &en)
			}
			if err == nil {
				err = fn(gen, &en)
			}
			if err != nil {
				r.spend()
				return err
			}
			a.markDrained(p.ref)
			r.handed = true
		}
	}
	clear(r.fresh)
	r.fresh = r.fresh[:0]
	for _, windows := range []bool{false, true} {
		if r.arena(windows).drainedWaste() {
			r.compact(windows)
		}
	}
	return nil
}

// Drained reports whether Drain has handed an entry over: the Restorer
// ends with FinishDrained then, and no longer holds every record a
// FinishGenerations needs.
func (r *Restorer) Drained() bool { return r.handed }

// StopDraining makes a draining Restorer that has handed nothing over a
// Restorer as NewRestorer makes (a copy whose windows cannot be built
// keeps records); it reports whether it could.
func (r *Restorer) StopDraining() bool {
	if r.handed {
		return false
	}
	r.draining, r.fresh = false, nil
	return true
}

// spend frees what the Restorer holds: it is spent.
func (r *Restorer) spend() {
	r.spent = true
	r.slices.free()
	r.windows.free()
	r.pending, r.orphans, r.fresh = nil, nil, nil
}

// FinishDrained ends a Restorer made by NewDraining: it drains what is
// left into fn (as Drain) and returns what FinishGenerations would (its
// Entries counts the committed entries of every drain). committed returns
// the value of a key's committed record as the built state holds it (any
// tag), for a repair of a key whose record was drained: nil if the built
// state left it out (the repair deletes the key). The Restorer is spent
// after it.
func (r *Restorer) FinishDrained(fn func(gen int64, en *windowing.Entry) error, committed func(key []byte) ([]byte, error)) (Result, error) {
	if err := r.Drain(fn); err != nil {
		return Result{}, err
	}
	defer r.spend()
	res := Result{Position: r.pos, HasPosition: r.hasPos, NextTag: NextOwner(max(r.maxTag, r.posTag)), Stale: r.stale}
	gens, err := r.Generations()
	if err != nil {
		return Result{}, err
	}
	res.Generations = gens
	if res.Repairs, err = r.repairs(res.NextTag, committed); err != nil {
		return Result{}, err
	}
	for _, a := range []*arena{&r.slices, &r.windows} {
		_ = a.each(func(rec *kept) error {
			if rec.flags&(flagDead|flagTombstone) == 0 && rec.key[1] != kindGeneration && r.committed(rec.tag) {
				res.Entries++
			}
			return nil
		})
	}
	return res, nil
}

// EntryOf fills en's identity (Kind, Partition, ID, Split, Start) from a
// slice or window record's key, as Drain hands it over, and returns its
// generation (VersionOne for a version-1 key); en.ID is a view of key.
func EntryOf(key []byte, en *windowing.Entry) (gen int64, err error) {
	if err := decodeID(key, en); err != nil {
		return 0, err
	}
	if key[0] == keyGenerations {
		return int64(binary.BigEndian.Uint64(key[6:14]) ^ 1<<63), nil
	}
	return VersionOne, nil
}
