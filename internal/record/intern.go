package record

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
)

// Intern table bounds: a Decoder remembers up to maxInterned group keys
// so that a repeated key costs no allocation. The table is emptied when it
// is full; internSlots (a power of two) keeps it at most half full.
const (
	maxInterned = 4096
	internSlots = 2 * maxInterned
)

// internTable is a fixed-size open-addressing set of key strings. A key is
// looked up by its hash and a function that compares it with the key
// wanted, which need not be written out.
type internTable struct {
	seed   maphash.Seed
	k0, k1 uint64 // the secret of fold
	slots  []internSlot
	used   int
}

// internSlot is one entry; an empty key marks a free slot (a group key is
// never empty: it is at least "{}").
type internSlot struct {
	hash uint64
	key  string
}

func newInternTable() internTable {
	seed := maphash.MakeSeed()
	return internTable{seed: seed, k0: maphash.String(seed, "k0"), k1: maphash.String(seed, "k1"),
		slots: make([]internSlot, internSlots)}
}

// fold returns the hash h with one more key field mixed in: its JSON text,
// or (quoted) the content of a string. A string's hash is the same either
// way, so equal keys hash alike however their parts were found. Up to 16
// bytes are mixed with one multiply, as in wyhash (the runtime's fallback
// hash), which is cheaper than maphash.Bytes for such short fields.
func (t *internTable) fold(h uint64, text []byte, quoted bool) uint64 {
	if !quoted && len(text) >= 2 && text[0] == '"' {
		text, quoted = text[1:len(text)-1], true
	}
	var a, b uint64
	switch n := len(text); {
	case n > 16:
		a = maphash.Bytes(t.seed, text)
	case n >= 8:
		a, b = binary.LittleEndian.Uint64(text), binary.LittleEndian.Uint64(text[n-8:])
	case n >= 4:
		a, b = uint64(binary.LittleEndian.Uint32(text)), uint64(binary.LittleEndian.Uint32(text[n-4:]))
	case n > 0:
		a = uint64(text[0])<<16 | uint64(text[n>>1])<<8 | uint64(text[n-1])
	}
	b ^= uint64(len(text)) << 1
	if quoted {
		b ^= 1
	}
	hi, lo := bits.Mul64(a^t.k0^h, b^t.k1)
	return hi ^ lo
}

// lookup returns the key with hash h for which same(key, size) reports
// true, if the table has one.
func (t *internTable) lookup(h uint64, same func(key string, size int) bool, size int) (string, bool) {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; t.slots[i].key != ""; i = (i + 1) & mask {
		if s := &t.slots[i]; s.hash == h && same(s.key, size) {
			return s.key, true
		}
	}
	return "", false
}

// add interns b, a key that lookup did not find under hash h, and returns
// it as a string: the only allocation for a new key.
func (t *internTable) add(h uint64, b []byte) string {
	if t.used >= maxInterned {
		clear(t.slots)
		t.used = 0
	}
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].key != "" {
		i = (i + 1) & mask
	}
	key := string(b) // never "": callers intern "{...}"
	t.slots[i] = internSlot{hash: h, key: key}
	t.used++
	return key
}
