package windowing

import (
	"math/bits"
	"slices"
)

// timer is an entry of a timer queue: key at time at. prefix caches the
// key's sortPrefix, so that most ties of time are one integer compare.
type timer struct {
	at     int64
	prefix uint64
	key    int32
}

// timers is a priority queue of entries by time, then key as firings are
// ordered (compareKeys): a radix heap, since the times taken out only go
// up (the watermark does). Bucket i holds the entries whose time first
// differs from last in bit i-1 (bucket 0: those at last), so a push is an
// append, and taking the minimum moves each entry down a few buckets over
// its life instead of sifting it through log n levels each time: a session
// that keeps growing moves its timer on about once per gap.
type timers struct {
	keys    *keySlab[sessKey]
	last    int64 // no entry is earlier; bucket 0 holds those at last
	buckets [65][]timer
	n       int
	sorted  bool // bucket 0 is in reverse key order: its head is its last entry
}

// bucket returns the bucket of time at, which is not before t.last. The
// XOR of two times is the XOR of their order-preserving unsigned forms.
func (t *timers) bucket(at int64) int { return bits.Len64(uint64(at ^ t.last)) }

func (t *timers) push(e timer) {
	if t.n == 0 {
		t.last = e.at
	} else if e.at < t.last { // after a Rewind or a restore: start over from e
		t.rebase(e.at)
	}
	i := t.bucket(e.at)
	t.buckets[i] = append(t.buckets[i], e)
	if i == 0 {
		t.sorted = false
	}
	t.n++
}

// rebase re-files every entry relative to last, earlier than them all.
func (t *timers) rebase(last int64) {
	var all []timer
	for i := range t.buckets {
		all = append(all, t.buckets[i]...)
		t.buckets[i] = t.buckets[i][:0]
	}
	t.last, t.sorted = last, false
	for _, e := range all {
		i := t.bucket(e.at)
		t.buckets[i] = append(t.buckets[i], e)
	}
}

// settle makes bucket 0 hold the earliest entries, if there are any.
func (t *timers) settle() {
	if t.n == 0 || len(t.buckets[0]) > 0 {
		return
	}
	i := 1
	for len(t.buckets[i]) == 0 {
		i++
	}
	b := t.buckets[i]
	m := b[0].at
	for _, e := range b[1:] {
		m = min(m, e.at)
	}
	t.last = m
	for _, e := range b {
		j := t.bucket(e.at) // < i
		t.buckets[j] = append(t.buckets[j], e)
	}
	t.buckets[i] = b[:0]
	t.sorted = false
}

// top returns the earliest entry's time, noTimer if there is none.
func (t *timers) top() int64 {
	t.settle()
	if t.n == 0 {
		return noTimer
	}
	return t.last
}

// due reports whether the earliest entry is at or before wm.
func (t *timers) due(wm int64) bool { return t.n > 0 && t.top() <= wm }

// head returns the first entry (earliest, then by key); there must be one.
func (t *timers) head() timer {
	t.settle()
	b := t.buckets[0]
	if !t.sorted {
		t.sortReverse(b)
		t.sorted = true
	}
	return b[len(b)-1]
}

// next moves the head entry (see head) to time at, its key's next live
// entry, or removes it if at is noTimer; timers is its key's entry count.
func (t *timers) next(at int64, timers *int32) {
	b := t.buckets[0]
	h := b[len(b)-1]
	t.buckets[0] = b[:len(b)-1]
	t.n--
	if at == noTimer {
		*timers--
		return
	}
	t.push(timer{at: at, prefix: h.prefix, key: h.key})
}

// sortReverse puts entries of one time in reverse key order: by hand
// for the few that usually share a millisecond (an insertion sort with the
// prefix compared inline), else by slices.SortFunc.
func (t *timers) sortReverse(b []timer) {
	if len(b) > 16 {
		slices.SortFunc(b, func(x, y timer) int {
			if t.less(&y, &x) {
				return -1
			}
			return 1
		})
		return
	}
	for i := 1; i < len(b); i++ {
		for j := i; j > 0; j-- {
			x, y := &b[j-1], &b[j] // want x after y in key order
			if x.prefix > y.prefix || x.prefix == y.prefix && !t.less(x, y) {
				break
			}
			*x, *y = *y, *x
		}
	}
}

// less orders entries of the same time by key; the sort prefix settles
// most without touching the keys.
func (t *timers) less(a, b *timer) bool {
	if a.prefix != b.prefix {
		return a.prefix < b.prefix
	}
	return compareKeys(t.keys.at(a.key), t.keys.at(b.key)) < 0
}

// deleteFunc removes the entries for which del is true.
func (t *timers) deleteFunc(del func(timer) bool) {
	t.n = 0
	for i := range t.buckets {
		t.buckets[i] = slices.DeleteFunc(t.buckets[i], del)
		t.n += len(t.buckets[i])
	}
}
