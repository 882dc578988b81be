package demo_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/demo"
)

func resultJSON(key string, start int64, count int64, firing string, revision int64) []byte {
	return fmt.Appendf(nil, `{"key":%s,"window_start":%d,"window_end":%d,"start":"x","end":"y","count":%d,`+
		`"aggregates":{"calls":%d,"avg_duration":12.5},"firing":%q,"revision":%d,"watermark":%d}`,
		key, start, start+5000, count, count, firing, revision, start+4999)
}

func TestBoardKeepsLatestWindowPerKey(t *testing.T) {
	b := demo.NewBoard("res", "late", "dlq")
	feed := []struct {
		topic string
		value []byte
	}{
		{"res", resultJSON(`{"sid":"sid_1"}`, 10_000, 4, "on_time", 0)},
		{"res", resultJSON(`{"sid":"sid_10"}`, 10_000, 1, "on_time", 0)},
		{"res", resultJSON(`{"sid":"sid_2"}`, 10_000, 2, "on_time", 0)},
		{"res", resultJSON(`{"sid":"sid_1"}`, 15_000, 3, "on_time", 0)},
		{"res", resultJSON(`{"sid":"sid_1"}`, 10_000, 5, "late", 1)}, // an older window: counted, not shown
		{"res", resultJSON(`{"sid":"sid_2"}`, 10_000, 3, "late", 1)}, // the same window, next revision
		{"late", []byte("anything")},
		{"dlq", []byte("{broken")},
		{"dlq", []byte("{}")},
		{"other", []byte("ignored")},
	}
	for _, f := range feed {
		if err := b.Observe(f.topic, f.value); err != nil {
			t.Fatalf("Observe(%s, %s) = %v", f.topic, f.value, err)
		}
	}
	got := b.Snapshot()
	if got.Results != 6 || got.LateFirings != 2 || got.Late != 1 || got.DeadLetters != 2 {
		t.Errorf("Snapshot() counts = results %d, late firings %d, late %d, dead letters %d; want 6, 2, 1, 2",
			got.Results, got.LateFirings, got.Late, got.DeadLetters)
	}
	var rows []string
	for _, r := range got.Rows {
		rows = append(rows, fmt.Sprintf("%s@%d:%d/%s/%d avg=%s", r.Key, r.Start, r.Count, r.Firing, r.Revision, r.Aggregates["avg_duration"]))
	}
	want := []string{"sid_1@15000:3/on_time/0 avg=12.5", "sid_2@10000:3/late/1 avg=12.5", "sid_10@10000:1/on_time/0 avg=12.5"}
	if !slices.Equal(rows, want) {
		t.Errorf("Snapshot().Rows = %v, want %v", rows, want)
	}
}

func TestBoardKeyText(t *testing.T) {
	tests := map[string]struct{ key, want string }{
		"one string field": {`{"sid":"sid_1"}`, "sid_1"},
		"a number":         {`{"id":7}`, "7"},
		"several fields":   {`{"sid":"a","region":"eu"}`, "region=eu sid=a"},
		"global":           {`{}`, "(global)"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			b := demo.NewBoard("res", "late", "")
			if err := b.Observe("res", resultJSON(tt.key, 0, 1, "on_time", 0)); err != nil {
				t.Fatal(err)
			}
			if got := b.Snapshot().Rows[0].Key; got != tt.want {
				t.Errorf("key %s shows as %q, want %q", tt.key, got, tt.want)
			}
		})
	}
}

func TestBoardRejectsBadResult(t *testing.T) {
	b := demo.NewBoard("res", "late", "dlq")
	err := b.Observe("res", []byte("not json"))
	if err == nil || !strings.Contains(err.Error(), "results topic value") {
		t.Errorf(`Observe(res, "not json") = %v, want an error naming the results topic`, err)
	}
}

func BenchmarkBoardObserve(b *testing.B) {
	value := resultJSON(`{"sid":"sid_1"}`, 10_000, 4, "on_time", 0)
	board := demo.NewBoard("res", "late", "dlq")
	b.ReportAllocs()
	for b.Loop() {
		if err := board.Observe("res", value); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBoardSessions: a tombstone on the results topic is a retraction,
// counted, not an error; the merged session's result replaces the row of
// a session it covers, even one that started later.
func TestBoardSessions(t *testing.T) {
	b := demo.NewBoard("res", "late", "dlq")
	first := `{"key":{"sid":"a"},"window_start":11600,"window_end":14600,"count":1,"aggregates":{},"firing":"on_time","revision":0,"watermark":14600}`
	merged := `{"key":{"sid":"a"},"window_start":10000,"window_end":14600,"count":2,"aggregates":{},"firing":"late","revision":0,"watermark":14600}`
	for _, v := range [][]byte{[]byte(first), nil, []byte(merged)} {
		if err := b.Observe("res", v); err != nil {
			t.Fatalf("Observe(%q) = %v", v, err)
		}
	}
	s := b.Snapshot()
	if s.Retractions != 1 || s.Results != 2 || len(s.Rows) != 1 || s.Rows[0].Start != 10000 || s.Rows[0].Count != 2 {
		t.Errorf("Snapshot() = %+v, want 1 retraction, 2 results and the merged session [10000,14600) as the row", s)
	}
}

// TestBoardGlobalWindows: a global window's result has null bounds; its
// row spans all time (not the epoch), and early firings replace it.
func TestBoardGlobalWindows(t *testing.T) {
	b := demo.NewBoard("res", "late", "dlq")
	for rev, count := range []int64{3, 7} {
		v := fmt.Appendf(nil, `{"key":{"sid":"s"},"window_start":null,"window_end":null,"start":null,"end":null,"count":%d,`+
			`"aggregates":{"calls":%d},"firing":"early","revision":%d,"watermark":1}`, count, count, rev)
		if err := b.Observe("res", v); err != nil {
			t.Fatalf("Observe(%s) = %v", v, err)
		}
	}
	rows := b.Snapshot().Rows
	if len(rows) != 1 || rows[0].Count != 7 || rows[0].Start != math.MinInt64 || rows[0].End != math.MaxInt64 {
		t.Errorf("Snapshot().Rows = %+v, want one row of count 7 spanning all time", rows)
	}
}

// TestBoardTakeFresh: TakeFresh hands over every result since its last
// call, in the order read (late firings of older windows too), and no
// more than 1000 at once, counting those past them.
func TestBoardTakeFresh(t *testing.T) {
	b := demo.NewBoard("res", "late", "dlq")
	for i, v := range [][]byte{resultJSON(`{"sid":"sid_1"}`, 15_000, 3, "on_time", 0), resultJSON(`{"sid":"sid_1"}`, 10_000, 5, "late", 1)} {
		if err := b.Observe("res", v); err != nil {
			t.Fatalf("Observe(result %d) = %v", i, err)
		}
	}
	if err := b.Observe("late", []byte("x")); err != nil {
		t.Fatal(err)
	}
	rows, skipped := b.TakeFresh()
	if len(rows) != 2 || rows[0].Start != 15_000 || rows[1].Firing != "late" || skipped != 0 {
		t.Errorf("TakeFresh() = %+v, %d; want both results in order, none skipped", rows, skipped)
	}
	if rows, skipped := b.TakeFresh(); len(rows) != 0 || skipped != 0 {
		t.Errorf("TakeFresh() again = %d rows, %d skipped; want none", len(rows), skipped)
	}
	for i := range 1003 {
		if err := b.Observe("res", resultJSON(`{"sid":"sid_1"}`, int64(i)*5000, 1, "on_time", 0)); err != nil {
			t.Fatal(err)
		}
	}
	if rows, skipped := b.TakeFresh(); len(rows) != 1000 || skipped != 3 || rows[999].Start != 999*5000 {
		t.Errorf("TakeFresh() after 1003 results = %d rows, %d skipped; want the first 1000, 3 skipped", len(rows), skipped)
	}
}
