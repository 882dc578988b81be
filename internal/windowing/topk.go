package windowing

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"aggregator/internal/record"
)

// top_k keeps, per pane, an exact count per distinct value, keyed by the
// value's JSON text: a string's quoted text (as the decoder writes it,
// the same for every spelling of one string), a number's shortest form
// (1 and 1.0 are one number), true, false, or an object's or array's
// text. Counts add up when panes merge (sliding windows, merged
// sessions), so the result is exact; a firing picks the k most frequent
// values of the merge. Counting a value already seen allocates nothing.
//
// The first byte tells the kinds apart, and they rank as ties break
// (docs/windows.md#top_k-the-most-frequent-values-of-a-field): numbers, then strings, then booleans; objects and arrays
// come last, by their JSON text.

// addTop counts v in m; the caller skips null values.
func addTop(m map[string]int64, v *record.Value) {
	key := v.Raw
	if v.IsNum {
		var buf [32]byte
		f := v.Num
		if f == 0 {
			f = 0 // -0 is 0
		}
		// Beyond float64 (1e400) the text as written stays: it is JSON.
		if b := strconv.AppendFloat(buf[:0], f, 'g', -1, 64); string(b) != key && !math.IsInf(f, 0) && !math.IsNaN(f) {
			if n, ok := m[string(b)]; ok {
				m[string(b)] = n + 1 // allocates: a number not in its shortest form
				return
			}
			key = string(b)
		}
	}
	if key == "" {
		return
	}
	if _, ok := m[key]; ok {
		m[key]++
		return
	}
	m[strings.Clone(key)] = 1 // not the record's text, which it would keep whole
}

// topKind ranks the kind of a top_k key: numbers, strings, booleans, the rest.
func topKind(key string) int {
	switch key[0] {
	case '"':
		return 1
	case 't', 'f':
		return 2
	case '{', '[':
		return 3
	}
	return 0
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

// compareTopKeys orders two keys as the tie rule does: by kind, numbers
// numerically, the others by code point (byte order of UTF-8).
func compareTopKeys(a, b string) int {
	if ka, kb := topKind(a), topKind(b); ka != kb {
		return ka - kb
	}
	if topKind(a) == 0 {
		x, _ := strconv.ParseFloat(a, 64)
		y, _ := strconv.ParseFloat(b, 64)
		return cmp.Compare(x, y)
	}
	return strings.Compare(a, b)
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
		out = append(out, e.key...)
		out = append(out, `,"count":`...)
		out = strconv.AppendInt(out, e.n, 10)
		out = append(out, '}')
	}
	return record.Value{Raw: string(append(out, ']'))}
}

// checkTops returns an error unless every key of a restored top_k state
// is a value's text as addTop makes it, with a positive count.
func checkTops(tops []map[string]int64) error {
	for _, m := range tops {
		for key, n := range m {
			ok := n > 0 && key != ""
			if ok {
				switch topKind(key) {
				case 0:
					f, err := strconv.ParseFloat(key, 64)
					ok = err == nil && strconv.FormatFloat(f, 'g', -1, 64) == key || errors.Is(err, strconv.ErrRange)
				case 1:
					ok = len(key) >= 2 && key[len(key)-1] == '"'
				case 2:
					ok = key == "true" || key == "false"
				}
			}
			if !ok {
				return fmt.Errorf("top_k value %q with count %d", key, n)
			}
		}
	}
	return nil
}
