package state

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"aggregator/internal/windowing"
)

// This file is the Restorer of the release before the arena (a map of
// chains, values copied, entries handed over in key order): the tests
// compare the Restorer with it over random changelogs
// (TestRestorerMatchesReference).

// A reference rebuilds one changelog partition's state from its records,
// given in log order from the start.
type reference struct {
	chains  map[string]*chain // by record key
	values  []byte            // the kept values, one after another (revision.off)
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
}

// chain is what a reference keeps of one key's records: the latest
// committed one, then the later ones.
type chain []revision

type revision struct {
	tag      uint64
	off, len int // the value in reference.values; len -1: a tombstone
}

// committed is the Restorer's, on the reference's owners.
func (r *reference) committed(tag uint64) bool {
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

// newReference returns an empty reference.
func newReference() *reference { return &reference{chains: map[string]*chain{}} }

func (r *reference) value(v revision) []byte {
	if v.len < 0 {
		return nil
	}
	return r.values[v.off : v.off+v.len : v.off+v.len]
}

// Records returns how many records Add was given.
func (r *reference) Records() int { return r.records }

// Add takes the next record of the changelog partition; tag is the value
// of its TagHeader header (nil if it has none). The reference copies what
// it keeps.
func (r *reference) Add(key, value, tag []byte) error {
	r.records++
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
		return nil
	}
	c := r.chains[string(key)]
	if c == nil {
		c = &chain{}
		r.chains[string(key)] = c
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
	// Keep the newest committed revision, and what follows it; a
	// revision of the same tag supersedes.
	keep := 0
	for i, v := range *c {
		if r.committed(v.tag) {
			keep = i
		}
	}
	*c = (*c)[keep:]
	for len(*c) > 0 && (*c)[len(*c)-1].tag == t {
		*c = (*c)[:len(*c)-1]
	}
	v := revision{tag: t, off: len(r.values), len: -1}
	if value != nil {
		r.values = append(r.values, value...)
		v.len = len(value)
	}
	*c = append(*c, v)
	return nil
}

// Position returns the partition's position so far, and whether it has one.
func (r *reference) Position() (Position, bool) { return r.pos, r.hasPos }

// Generations returns the partition's live generations as the records so
// far hold them, by version (the ones FinishGenerations returns): the
// core decides from them, before the entries are handed over, which
// operator each generation restores into.
func (r *reference) Generations() ([]Generation, error) {
	var stored []Generation
	legacyEntries, entryGens := false, map[int64]bool{}
	for key, c := range r.chains {
		chosen := -1
		for i, v := range *c {
			if v.tag <= r.posTag {
				chosen = i
			}
		}
		if chosen < 0 || (*c)[chosen].len < 0 {
			continue
		}
		k, err := decodeKey([]byte(key))
		switch {
		case err != nil:
			return nil, err
		case k.kind == kindGeneration:
			g, err := decodeGeneration(k, r.value((*c)[chosen]))
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", key, err)
			}
			stored = append(stored, g)
		case k.hasGen:
			entryGens[k.gen] = true
		default:
			legacyEntries = true
		}
	}
	return generations(stored, legacyEntries, entryGens)
}

// FinishGenerations hands fn the partition's committed entries, each with
// its generation's version, every slice (or session) first, then every
// window, and returns the partition's generations in Result.Generations.
// A slice's *Entry is valid during the call only (the engine copies it), a
// window's is fn's to keep.
func (r *reference) FinishGenerations(fn func(gen int64, en *windowing.Entry) error) (Result, error) {
	res := Result{Position: r.pos, HasPosition: r.hasPos, NextTag: NextOwner(max(r.maxTag, r.posTag)), Stale: r.stale}
	// In key order: a key's slices by start (the engine appends each after
	// the last), and the same order on every restore.
	type keyed struct {
		key string
		c   *chain
	}
	all := make([]keyed, 0, len(r.chains))
	for key, c := range r.chains {
		all = append(all, keyed{key, c})
	}
	slices.SortFunc(all, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	var windows []keyed
	var en windowing.Entry // slices are lent to fn; windows are kept
	// The generations come first: an entry is handed over with its
	// generation's version.
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
	genOf := func(key string) int64 {
		if key[0] == keyGenerations {
			return int64(binary.BigEndian.Uint64([]byte(key[6:14])) ^ 1<<63)
		}
		return legacyGen
	}
	for _, kc := range all {
		c := *kc.c
		chosen := -1
		for i, v := range c {
			if r.committed(v.tag) {
				chosen = i
			}
		}
		if chosen != len(c)-1 || r.staleKeys[kc.key] {
			rep := Repair{Key: []byte(kc.key)}
			if chosen >= 0 && c[chosen].len >= 0 {
				rep.Value = retag(r.value(c[chosen]), res.NextTag)
			}
			res.Repairs = append(res.Repairs, rep)
		}
		if chosen < 0 || c[chosen].len < 0 || kc.key[1] == kindGeneration {
			continue
		}
		if kc.key[1] == kindWindow {
			windows = append(windows, keyed{kc.key, &chain{c[chosen]}})
			continue
		}
		if err := decode([]byte(kc.key), r.value(c[chosen]), &en); err != nil {
			return Result{}, err
		}
		if err := fn(genOf(kc.key), &en); err != nil {
			return Result{}, err
		}
		res.Entries++
	}
	for _, kc := range windows {
		en := &windowing.Entry{}
		if err := decode([]byte(kc.key), r.value((*kc.c)[0]), en); err != nil {
			return Result{}, err
		}
		if err := fn(genOf(kc.key), en); err != nil {
			return Result{}, err
		}
		res.Entries++
	}
	return res, nil
}
