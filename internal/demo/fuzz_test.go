package demo_test

import (
	"slices"
	"testing"

	"aggregator/internal/demo"
)

// FuzzBoardObserve feeds arbitrary results-topic values: Observe must
// return an error or count a result, and rows stay in key order.
func FuzzBoardObserve(f *testing.F) {
	f.Add(resultJSON(`{"sid":"sid_1"}`, 10_000, 4, "on_time", 0))
	f.Add([]byte(`{"key":{},"window_start":-5000,"aggregates":{"x":1e308}}`))
	f.Add([]byte(`{"key":{"a":null,"b":[1]},"aggregates":{"y":"text"}}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, value []byte) {
		b := demo.NewBoard("res", "late", "dlq")
		for _, key := range []string{`{"sid":"sid_10"}`, `{"sid":"sid_9"}`} {
			if err := b.Observe("res", resultJSON(key, 0, 1, "on_time", 0)); err != nil {
				t.Fatal(err)
			}
		}
		err := b.Observe("res", value)
		got := b.Snapshot()
		if want := int64(3); err == nil && got.Results != want || err != nil && got.Results != want-1 {
			t.Fatalf("Observe(%q) = %v, and Results = %d", value, err, got.Results)
		}
		keys := make([]string, len(got.Rows))
		for i, r := range got.Rows {
			keys[i] = r.Key
		}
		if i9, i10 := slices.Index(keys, "sid_9"), slices.Index(keys, "sid_10"); i9 < 0 || i10 < i9 {
			t.Fatalf("rows %q after Observe(%q): want sid_9 before sid_10", keys, value)
		}
	})
}
