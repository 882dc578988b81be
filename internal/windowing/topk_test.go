package windowing_test

import (
	"math"
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// topRec is a record at ts whose only aggregate input is v.
func topRec(ts int64, v record.Value) *record.Record {
	key, fields := textKey("k")
	return &record.Record{Time: ts, Key: key, KeyFields: fields, Values: []record.Value{v}}
}

// boolean is a JSON true or false as the decoder gives it.
func boolean(b bool) record.Value {
	s := map[bool]string{true: "true", false: "false"}[b]
	return record.Value{Str: s, Raw: s}
}

// TestTopKTies: the order of docs/windows.md, worked by hand. In [0, 10): 1 (as 1
// and 1.0), 2, "a", "b" twice each, true and "B" once, a null skipped
// (the count is still 11 records). Ties at 2 go numbers first, numerically (1, 2),
// then strings by code point ("a" before "b"); at 1, strings ("B") before
// booleans (true).
func TestTopKTies(t *testing.T) {
	in := []record.Value{record.Number(2), record.Text("b"), record.Number(1), record.Text("a"), boolean(true),
		record.Text("a"), {}, record.Number(1.0), record.Text("B"), record.Number(2), record.Text("b")}
	tests := map[string]struct {
		k    int
		want string
	}{
		"k 1":              {1, `[{"value":1,"count":2}]`},
		"k 3 cuts a tie":   {3, `[{"value":1,"count":2},{"value":2,"count":2},{"value":"a","count":2}]`},
		"k 5":              {5, `[{"value":1,"count":2},{"value":2,"count":2},{"value":"a","count":2},{"value":"b","count":2},{"value":"B","count":1}]`},
		"k above distinct": {10, `[{"value":1,"count":2},{"value":2,"count":2},{"value":"a","count":2},{"value":"b","count":2},{"value":"B","count":1},{"value":true,"count":1}]`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			e, c := newEngine(t, params{"tumbling", 10, 0, 0, 0, "on_watermark"}.spec(windowing.Aggregate{Fn: windowing.FnTopK, K: tt.k}))
			for i, v := range in {
				e.Add(topRec(int64(min(i, 9)), v))
			}
			e.Add(topRec(15, record.Text("z")))
			e.Advance(math.MaxInt64)
			if len(c.got) != 2 {
				t.Fatalf("%d results, want 2 ([0,10) and [10,20))", len(c.got))
			}
			if got := c.got[0].Aggregates[0].Raw; got != tt.want {
				t.Errorf("top_k(k=%d) of [0,10) = %s, want %s", tt.k, got, tt.want)
			}
			if c.got[0].Count != 11 {
				t.Errorf("count of [0,10) = %d, want 11 (the null is counted, not ranked)", c.got[0].Count)
			}
		})
	}
}

// TestTopKMerges: counts add up across a sliding window's slices and a
// merged session's parts. Sliding 4/2: "x" at 0, 1 and "y" at 2, 3, 3:
// window [0,4) has y 3, x 2 — its slices alone would say x 2 (in [0,2))
// and y 3 (in [2,4)). Session gap 3: x at 0 and y at 10 make [0,3) and
// [10,13); x at 2, y at 5 and x at 7 grow the first to [0,10), which
// touches the second: one session [0,13) with x 3, y 2.
func TestTopKMerges(t *testing.T) {
	x, y := record.Text("x"), record.Text("y")
	t.Run("sliding", func(t *testing.T) {
		e, c := newEngine(t, params{"sliding", 4, 2, 0, 0, "on_watermark"}.spec(windowing.Aggregate{Fn: windowing.FnTopK, K: 2}))
		for i, v := range []record.Value{x, x, y, y, y} {
			e.Add(topRec([]int64{0, 1, 2, 3, 3}[i], v))
		}
		e.Advance(3)
		want := `[{"value":"y","count":3},{"value":"x","count":2}]`
		if len(c.got) != 2 || c.got[1].Window != (windowing.Window{Start: 0, End: 4}) || c.got[1].Aggregates[0].Raw != want {
			t.Fatalf("results at W=3 = %+v, want [-2,2) then [0,4) with %s", c.got, want)
		}
	})
	t.Run("session", func(t *testing.T) {
		c := &collector{}
		s, err := windowing.NewSessions(params{"session", 3, 0, 0, 0, "on_watermark"}.spec(windowing.Aggregate{Fn: windowing.FnTopK, K: 2}), c)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range []record.Value{x, y, x, y, x} {
			s.Add(topRec([]int64{0, 10, 2, 5, 7}[i], v))
		}
		s.Advance(math.MaxInt64)
		want := `[{"value":"x","count":3},{"value":"y","count":2}]`
		if len(c.got) != 1 || c.got[0].Window != (windowing.Window{Start: 0, End: 13}) || c.got[0].Aggregates[0].Raw != want {
			t.Fatalf("results = %+v, want one session [0,13) with %s", c.got, want)
		}
	})
}
