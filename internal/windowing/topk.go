package windowing

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"aggregator/internal/record"
)

// top_k keeps, per pane, an exact count per distinct value, keyed by
// topKey: one kind byte, then the value. Counts add up when panes merge
// (sliding windows, merged sessions), so the result is exact; a firing
// picks the k most frequent values of the merge.
//
// The kind bytes order the kinds as ties break (SPEC §2): numbers, then
// strings, then booleans; objects and arrays, which the SPEC does not
// rank, come last, by their JSON text.
const (
	topNum   byte = 1 // 8 bytes: the float64's bits, big endian (-0 is 0)
	topStr   byte = 2 // the string's text
	topBool  byte = 3 // false or true
	topOther byte = 4 // an object or array: its JSON text
)

// appendTopKey appends v's topKey to dst. 1 and 1.0 are one number.
func appendTopKey(dst []byte, v *record.Value) []byte {
	switch {
	case v.IsNum:
		f := v.Num
		if f == 0 {
			f = 0 // -0 is 0
		}
		return binary.BigEndian.AppendUint64(append(dst, topNum), math.Float64bits(f))
	case v.Raw != "" && v.Raw[0] == '"':
		return append(append(dst, topStr), v.Str...)
	case v.Raw == "true" || v.Raw == "false":
		return append(append(dst, topBool), v.Raw...)
	}
	return append(append(dst, topOther), v.Raw...)
}

// addTop counts v in m; a null (the zero Value) is skipped. Looking a
// value up copies nothing; only a new value's key is allocated.
func addTop(m map[string]int64, v *record.Value) {
	if v.Raw == "" && !v.IsNum {
		return
	}
	var buf [64]byte
	key := appendTopKey(buf[:0], v)
	if n, ok := m[string(key)]; ok {
		m[string(key)] = n + 1
		return
	}
	m[string(key)] = 1
}

// topEntry is one counted value.
type topEntry struct {
	key string
	n   int64
}

// before reports whether a ranks above b: higher count, then the value
// order of the tie rule.
func (a topEntry) before(b topEntry) bool {
	if a.n != b.n {
		return a.n > b.n
	}
	return compareTopKeys(a.key, b.key) < 0
}

// compareTopKeys orders two topKeys as the tie rule does: by kind, numbers
// numerically, the others by code point (byte order of UTF-8).
func compareTopKeys(a, b string) int {
	if a[0] != b[0] {
		return int(a[0]) - int(b[0])
	}
	if a[0] == topNum {
		return cmp.Compare(topNumber(a), topNumber(b))
	}
	return strings.Compare(a[1:], b[1:]) // byte order of UTF-8 is code point order
}

// topNumber is the number a topNum key holds.
func topNumber(key string) float64 {
	var u uint64
	for i := 1; i < 9; i++ {
		u = u<<8 | uint64(key[i])
	}
	return math.Float64frombits(u)
}

// topK returns the k most frequent values of m as the JSON array
// [{"value": v, "count": n}, ...], by count descending, ties by value.
func topK(m map[string]int64, k int) record.Value {
	best := make([]topEntry, 0, min(k, len(m)))
	for key, n := range m {
		e := topEntry{key, n}
		if len(best) == k && !e.before(best[k-1]) {
			continue
		}
		i, _ := slices.BinarySearchFunc(best, e, func(x, y topEntry) int {
			if x.before(y) {
				return -1
			}
			return 1
		})
		if len(best) == k {
			best = best[:k-1]
		}
		best = slices.Insert(best, i, e)
	}
	out := []byte{'['}
	for i, e := range best {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"value":`...)
		out = appendTopValue(out, e.key)
		out = append(out, `,"count":`...)
		out = strconv.AppendInt(out, e.n, 10)
		out = append(out, '}')
	}
	return record.Value{Raw: string(append(out, ']'))}
}

// appendTopValue appends the JSON of the value a topKey holds.
func appendTopValue(dst []byte, key string) []byte {
	switch key[0] {
	case topNum:
		f := topNumber(key)
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return append(dst, "null"...)
		case f == math.Trunc(f) && math.Abs(f) < 1<<53:
			return strconv.AppendInt(dst, int64(f), 10)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64)
	case topStr:
		return record.AppendQuoted(dst, []byte(key[1:]))
	}
	return append(dst, key[1:]...)
}

// checkTops returns an error unless every key of a restored top_k state is
// a well-formed topKey with a positive count.
func checkTops(tops []map[string]int64) error {
	for _, m := range tops {
		for key, n := range m {
			ok := n > 0 && key != "" && key[0] >= topNum && key[0] <= topOther
			if ok && key[0] == topNum {
				ok = len(key) == 9
			}
			if ok && key[0] == topBool {
				ok = key[1:] == "true" || key[1:] == "false"
			}
			if !ok {
				return fmt.Errorf("top_k value %q with count %d", key, n)
			}
		}
	}
	return nil
}
