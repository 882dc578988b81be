package state

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"math/bits"
)

// An arena keeps a Restorer's records: their bytes one after another in
// chunks, and an index from each key to its latest record, each record
// linked to the key's record before it (a chain, oldest first: the latest
// committed record, then the ones after it). Nothing is allocated per
// record: a chunk holds many, and the index is one slice of 8-byte slots.
//
// A record at a ref is:
//
//	tag        8 bytes, little endian
//	link       8 bytes, little endian: the previous record's ref + 1 (0:
//	           none) in the low 40 bits, the flags in the high 8
//	key        uvarint length, bytes
//	value      uvarint length, bytes (none for a tombstone)
type arena struct {
	chunks [][]byte // each filled by appends up to its capacity
	// slots is the index, open addressing with linear probing: 0 for an
	// empty slot, else the top 24 bits of the key's hash above its
	// latest record's ref + 1 (40 bits).
	slots []uint64
	keys  int // slots in use
	seed  maphash.Seed
	// bytes are the bytes appended to chunks, deadBytes those of records no
	// chain holds any more (superseded): compact reclaims them.
	bytes, deadBytes int64
	minWaste         int64 // the dead bytes below which compact is not worth it
	// firstSize is the size of the first chunk: compact's copy starts
	// with one that holds what it copies (up to maxChunk), not a small
	// one doubling, which would leave up to half of the chunks empty.
	firstSize int
}

// ref names a record: its chunk's index above its offset in the chunk.
type ref uint64

const noRef = ^ref(0) // ref(0) - 1: a link of 0

const (
	offsetBits = 20 // a chunk holds 1 MiB, or one larger record
	maxChunk   = 1 << offsetBits
	firstChunk = 4 << 10
	minSlots   = 1 << 10
	headerLen  = 16
	refBits    = 40
	refMask    = 1<<refBits - 1
)

// Record flags (the high byte of the link).
const (
	flagDead      = 1 << iota // no chain holds it: superseded
	flagTombstone             // no value
	flagFollowed              // a later record of its key was added
	// flagDrained: Drain handed the record over (restore.go); its value
	// is the built state's, and its bytes are waste.
	flagDrained
	// flagBare: the record keeps no value bytes (a drained record that
	// compact copied): only its key, tag and links.
	flagBare
)

func (a *arena) init() {
	a.seed, a.minWaste = maphash.MakeSeed(), 1<<20
	a.slots = make([]uint64, minSlots)
}

// size is the memory the arena holds.
func (a *arena) size() int64 {
	n := int64(len(a.slots)) * 8
	for _, c := range a.chunks {
		n += int64(cap(c))
	}
	return n
}

func (a *arena) rec(at ref) []byte { return a.chunks[at>>offsetBits][at&(maxChunk-1):] }

func (a *arena) tag(at ref) uint64 { return binary.LittleEndian.Uint64(a.rec(at)) }

func (a *arena) link(at ref) uint64 { return binary.LittleEndian.Uint64(a.rec(at)[8:]) }

func (a *arena) flags(at ref) uint8 { return uint8(a.link(at) >> 56) }

func (a *arena) setLink(at ref, prev ref, flags uint8) {
	binary.LittleEndian.PutUint64(a.rec(at)[8:], uint64(flags)<<56|uint64(prev+1)&refMask)
}

// prev is the key's record before at, noRef if none.
func (a *arena) prev(at ref) ref { return ref(a.link(at)&refMask) - 1 }

func (a *arena) dead(at ref) bool { return a.flags(at)&flagDead != 0 }

func (a *arena) tombstone(at ref) bool { return a.flags(at)&flagTombstone != 0 }

func (a *arena) drained(at ref) bool { return a.flags(at)&flagDrained != 0 }

// noValue reports whether a record of flags keeps no value bytes.
func noValue(flags uint8) bool { return flags&(flagTombstone|flagBare) != 0 }

// followed reports whether a later record of at's key was added.
func (a *arena) followed(at ref) bool { return a.flags(at)&flagFollowed != 0 }

// fields returns the record's key and value (nil for a tombstone or a
// bare record), and its length in bytes.
func (a *arena) fields(at ref) (key, value []byte, n int) {
	b := a.rec(at)
	kl, m := binary.Uvarint(b[headerLen:])
	n = headerLen + m
	key, n = b[n:n+int(kl):n+int(kl)], n+int(kl)
	if noValue(a.flags(at)) {
		return key, nil, n
	}
	vl, m := binary.Uvarint(b[n:])
	n += m
	return key, b[n : n+int(vl) : n+int(vl)], n + int(vl)
}

func (a *arena) key(at ref) []byte { k, _, _ := a.fields(at); return k }

func (a *arena) value(at ref) []byte { _, v, _ := a.fields(at); return v }

// markDrained marks at handed over to the built state: its value bytes
// are waste, which the next compact reclaims (the record stays, bare).
func (a *arena) markDrained(at ref) {
	f := a.flags(at)
	if f&flagDrained != 0 {
		return
	}
	if !noValue(f) {
		v := a.value(at)
		a.deadBytes += int64(uvarintLen(len(v)) + len(v))
	}
	a.setLink(at, a.prev(at), f|flagDrained)
}

// kill marks at dead: superseded, held by no chain.
func (a *arena) kill(at ref) {
	if a.dead(at) {
		return
	}
	_, v, n := a.fields(at)
	if a.drained(at) && v != nil {
		n -= uvarintLen(len(v)) + len(v) // counted by markDrained
	}
	a.deadBytes += int64(n)
	a.setLink(at, a.prev(at), a.flags(at)|flagDead)
}

// cutBefore ends at's chain at at: the records before it are dead (at
// is committed, and supersedes them).
func (a *arena) cutBefore(at ref) {
	p := a.prev(at)
	a.setLink(at, noRef, a.flags(at))
	for p != noRef {
		next := a.prev(p)
		a.kill(p)
		p = next
	}
}

func (a *arena) hash(key []byte) uint64 { return maphash.Bytes(a.seed, key) }

// home is the slot a key of hash h probes first.
func (a *arena) home(h uint64) int { return int(h >> (64 - bits.TrailingZeros(uint(len(a.slots))))) }

// probe returns the slot of key (hash h), or the empty one where it goes.
func (a *arena) probe(key []byte, h uint64) (int, bool) {
	mask := len(a.slots) - 1
	top := h >> refBits
	for i := a.home(h); ; i = (i + 1) & mask {
		s := a.slots[i]
		if s == 0 {
			return i, false
		}
		if s>>refBits == top && bytes.Equal(a.key(ref(s&refMask)-1), key) {
			return i, true
		}
	}
}

// find returns key's latest record, noRef if it has none.
func (a *arena) find(key []byte) ref {
	i, ok := a.probe(key, a.hash(key))
	if !ok {
		return noRef
	}
	return ref(a.slots[i]&refMask) - 1
}

// put appends a record of key. A record of the same tag as the key's
// latest ones supersedes them.
func (a *arena) put(key, value []byte, tag uint64) ref {
	h := a.hash(key)
	i, found := a.probe(key, h)
	prev := noRef
	if found {
		prev = ref(a.slots[i]&refMask) - 1
		for prev != noRef && a.tag(prev) == tag {
			next := a.prev(prev)
			a.kill(prev)
			prev = next
		}
		if prev != noRef {
			a.setLink(prev, a.prev(prev), a.flags(prev)|flagFollowed)
		}
	}
	var flags uint8
	if value == nil {
		flags = flagTombstone
	}
	at := a.append(key, value, tag, prev, flags)
	a.slots[i] = h>>refBits<<refBits | uint64(at+1)
	if !found {
		a.keys++
		if a.keys*4 >= len(a.slots)*3 {
			a.grow(len(a.slots) * 2)
		}
	}
	return at
}

// append writes a record and returns its ref.
func (a *arena) append(key, value []byte, tag uint64, prev ref, flags uint8) ref {
	n := headerLen + uvarintLen(len(key)) + len(key)
	if !noValue(flags) {
		n += uvarintLen(len(value)) + len(value)
	}
	last := len(a.chunks) - 1
	if last < 0 || cap(a.chunks[last])-len(a.chunks[last]) < n {
		size := max(firstChunk, a.firstSize)
		if last >= 0 {
			size = min(2*cap(a.chunks[last]), maxChunk)
		}
		a.chunks = append(a.chunks, make([]byte, 0, max(size, n)))
		last++
	}
	c := a.chunks[last]
	at := ref(last)<<offsetBits | ref(len(c))
	c = binary.LittleEndian.AppendUint64(c, tag)
	c = binary.LittleEndian.AppendUint64(c, uint64(flags)<<56|uint64(prev+1)&refMask)
	c = append(binary.AppendUvarint(c, uint64(len(key))), key...)
	if !noValue(flags) {
		c = append(binary.AppendUvarint(c, uint64(len(value))), value...)
	}
	a.chunks[last] = c
	a.bytes += int64(n)
	return at
}

func uvarintLen(n int) int { return (bits.Len64(uint64(n)|1) + 6) / 7 }

// grow makes the index n slots.
func (a *arena) grow(n int) {
	old := a.slots
	a.slots = make([]uint64, n)
	for _, s := range old {
		if s != 0 {
			a.insert(s, a.slotHash(s))
		}
	}
}

// slotHash is the hash of slot s's key, or as much of it as home reads.
func (a *arena) slotHash(s uint64) uint64 {
	if len(a.slots) <= 1<<(64-refBits) {
		return s >> refBits << refBits // home reads the top 24 bits at most
	}
	return a.hash(a.key(ref(s&refMask) - 1))
}

// insert puts slot s, of a key not in the index, whose hash is h.
func (a *arena) insert(s, h uint64) {
	mask := len(a.slots) - 1
	i := a.home(h)
	for a.slots[i] != 0 {
		i = (i + 1) & mask
	}
	a.slots[i] = s
}

// kept is a record as each and drain hand it over: its ref, tag,
// flags, key and value (nil for a tombstone).
type kept struct {
	at         ref
	tag        uint64
	flags      uint8
	key, value []byte
}

// each calls fn with every record, in the order they were added; r is
// valid during the call only.
func (a *arena) each(fn func(r *kept) error) error {
	var r kept
	for ci := range a.chunks {
		if err := a.chunk(ci, &r, fn); err != nil {
			return err
		}
	}
	return nil
}

// chunk calls fn with each record of chunk ci.
func (a *arena) chunk(ci int, r *kept, fn func(r *kept) error) error {
	c := a.chunks[ci]
	for off := 0; off < len(c); {
		r.at = ref(ci)<<offsetBits | ref(off)
		b := c[off:]
		r.tag = binary.LittleEndian.Uint64(b)
		r.flags = uint8(binary.LittleEndian.Uint64(b[8:]) >> 56)
		var n int
		r.key, r.value, n = a.fields(r.at)
		if err := fn(r); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// drain is each, and frees each chunk once fn has had its records, and
// the index before: the arena is empty after it.
func (a *arena) drain(fn func(r *kept) error) error {
	a.slots = nil
	var r kept
	for ci := range a.chunks {
		if err := a.chunk(ci, &r, fn); err != nil {
			return err
		}
		a.chunks[ci] = nil
	}
	a.free()
	return nil
}

// free drops everything the arena holds.
func (a *arena) free() {
	a.chunks, a.slots, a.keys, a.bytes, a.deadBytes = nil, nil, 0, 0, 0
}

// wasteful reports whether the dead records are worth compacting: more
// than the live ones, and minWaste at least.
func (a *arena) wasteful() bool { return a.deadBytes >= a.minWaste && 2*a.deadBytes > a.bytes }

// drainedWaste reports whether a draining Restorer's arena is worth
// compacting after a drain: a quarter of it dead, and minWaste at least.
// A drained record's value is most of its bytes but not all (its key,
// tag and links stay): at wasteful's half, an arena drained whole would
// never be compacted.
func (a *arena) drainedWaste() bool { return a.deadBytes >= a.minWaste && 4*a.deadBytes > a.bytes }

// compact copies every chain into a new arena, oldest record first, and
// leaves out the keys whose one record drop says to. moved maps refs to
// keep track of to their new refs (noRef if dropped).
func (a *arena) compact(moved map[ref]ref, drop func(ref) bool) {
	n := arena{seed: a.seed, minWaste: a.minWaste, firstSize: int(min(a.bytes-a.deadBytes, maxChunk))}
	n.slots = make([]uint64, max(minSlots, 1<<bits.Len(uint(a.keys*4/3+1))))
	var chain []ref
	for _, s := range a.slots {
		if s == 0 {
			continue
		}
		chain = chain[:0]
		for at := ref(s&refMask) - 1; at != noRef; at = a.prev(at) {
			chain = append(chain, at)
		}
		if len(chain) == 1 && drop(chain[0]) {
			continue
		}
		prev := noRef
		for i := len(chain) - 1; i >= 0; i-- {
			at := chain[i]
			key, value, _ := a.fields(at)
			flags := a.flags(at) &^ flagDead
			if flags&flagDrained != 0 && flags&flagTombstone == 0 {
				flags, value = flags|flagBare, nil // the built state holds it
			}
			prev = n.append(key, value, a.tag(at), prev, flags)
			if _, ok := moved[at]; ok {
				moved[at] = prev
			}
		}
		key := a.key(chain[0])
		top := s >> refBits << refBits
		n.keys++
		h := top
		if len(n.slots) > 1<<(64-refBits) {
			h = n.hash(key)
		}
		n.insert(top|uint64(prev+1), h)
	}
	*a = n
}
