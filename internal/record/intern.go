package record

import "hash/maphash"

// Intern table bounds: a Decoder remembers up to maxInterned group keys
// so that a repeated key costs no allocation. The table is emptied when it
// is full; internSlots (a power of two) keeps it at most half full.
const (
	maxInterned = 4096
	internSlots = 2 * maxInterned
)

// internTable is a fixed-size open-addressing set of key strings, looked up
// by the key's bytes without converting them to a string.
type internTable struct {
	seed  maphash.Seed
	slots []internSlot
	used  int
}

// internSlot is one entry; an empty key marks a free slot (a group key is
// never empty: it is at least "{}").
type internSlot struct {
	hash uint64
	key  string
}

func newInternTable() internTable {
	return internTable{seed: maphash.MakeSeed(), slots: make([]internSlot, internSlots)}
}

// intern returns a string equal to b, allocating only when b is new.
func (t *internTable) intern(b []byte) string {
	h := maphash.Bytes(t.seed, b)
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for ; t.slots[i].key != ""; i = (i + 1) & mask {
		if s := &t.slots[i]; s.hash == h && s.key == string(b) {
			return s.key
		}
	}
	if t.used >= maxInterned {
		clear(t.slots)
		t.used = 0
		for i = h & mask; t.slots[i].key != ""; i = (i + 1) & mask {
		}
	}
	key := string(b) // never "": callers intern "{...}"
	t.slots[i] = internSlot{hash: h, key: key}
	t.used++
	return key
}
