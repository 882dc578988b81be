package windowing

import (
	"hash/maphash"
	"iter"
	"math/bits"
)

// keyTable maps (partition, key) to a slab index: open addressing with
// linear probing over one uint64 per slot (a 32-bit hash tag, whose top
// bits are the home slot, and the index+1; 0 is empty). It costs about 12
// bytes per key where a map[string]int32 costs about 37, and it keeps no
// copy of the key: the key's slab entry holds the text.
type keyTable struct {
	slots []uint64
	bits  uint // len(slots) = 1 << bits
	n     int
	seed  uint64
}

const minTableBits = 4

func newKeyTable() keyTable {
	return keyTable{slots: make([]uint64, 1<<minTableBits), bits: minTableBits, seed: maphash.Comparable(maphash.MakeSeed(), 0)}
}

// hash is the 32-bit tag of (part, key): a seeded multiply-mix hash in
// the style of wyhash, 8 bytes per step (keys are short; maphash.String
// costs twice as much per record).
func (t *keyTable) hash(part int32, key string) uint32 {
	const p0, p1, p2 = 0xa0761d6478bd642f, 0xe7037ed1a0b428db, 0x8ebc6af09c88c6e3
	h := t.seed ^ uint64(uint32(part))<<32 ^ uint64(len(key))
	for ; len(key) >= 8; key = key[8:] {
		h = mix(h^p0, le64(key)^p1)
	}
	var w uint64
	for i := range len(key) {
		w |= uint64(key[i]) << (8 * i)
	}
	h = mix(h^p2, w^p1)
	return uint32(h>>32 ^ h)
}

// mix folds the 128-bit product of a and b.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// le64 reads the first 8 bytes of s, little endian.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// probe yields the slab indices stored under tag, in probe order:
// keySlab.find stops at the index whose keyState is (part, key). An
// iterator, because it inlines into find with the slab access in the loop
// body (a find taking a func for the slab, which does not inline, cost the
// tumbling benchmark 5-10%).
func (t *keyTable) probe(tag uint32) iter.Seq[int32] {
	return func(yield func(int32) bool) {
		m := t.mask()
		for i := t.home(tag); t.slots[i] != 0; i = (i + 1) & m {
			if s := t.slots[i]; uint32(s>>32) == tag && !yield(int32(uint32(s)-1)) {
				return
			}
		}
	}
}

func (t *keyTable) home(tag uint32) uint64 { return uint64(tag) >> (32 - t.bits) }

func (t *keyTable) mask() uint64 { return uint64(len(t.slots) - 1) }

// insert adds slab index idx under tag; the key must not be present.
func (t *keyTable) insert(tag uint32, idx int32) {
	if (t.n+1)*5 > len(t.slots)*4 { // load above 0.8
		t.grow()
	}
	t.put(uint64(tag)<<32 | uint64(uint32(idx)+1))
	t.n++
}

func (t *keyTable) put(s uint64) {
	m := t.mask()
	i := t.home(uint32(s >> 32))
	for t.slots[i] != 0 {
		i = (i + 1) & m
	}
	t.slots[i] = s
}

func (t *keyTable) grow() { t.resize(t.bits + 1) }

// reserve makes room for n keys in all, at the load insert keeps: one
// resize, where n inserts would double the table again and again.
func (t *keyTable) reserve(n int) {
	b := t.bits
	for n*5 > (1<<b)*4 {
		b++
	}
	if b > t.bits {
		t.resize(b)
	}
}

// resize makes the table 1<<b slots, b above its bits.
func (t *keyTable) resize(b uint) {
	old := t.slots
	t.bits = b
	t.slots = make([]uint64, 1<<t.bits)
	for _, s := range old {
		if s != 0 {
			t.put(s)
		}
	}
}

// remove deletes slab index idx, stored under tag, shifting back the
// entries after it so that no probe sequence is broken.
func (t *keyTable) remove(tag uint32, idx int32) {
	m := t.mask()
	want := uint64(tag)<<32 | uint64(uint32(idx)+1)
	i := t.home(tag)
	for t.slots[i] != want {
		i = (i + 1) & m
	}
	t.n--
	for j := i; ; {
		t.slots[i] = 0
		for {
			j = (j + 1) & m
			s := t.slots[j]
			if s == 0 {
				return
			}
			// s stays unless its home is outside (i, j] cyclically.
			h := t.home(uint32(s >> 32))
			if i <= j && i < h && h <= j || i > j && (i < h || h <= j) {
				continue
			}
			t.slots[i] = s
			i = j
			break
		}
	}
}
