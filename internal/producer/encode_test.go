package producer_test

import (
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"aggregator/internal/producer"
	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// TestAppendTime compares the hand-written formatter with time.Format.
func TestAppendTime(t *testing.T) {
	tests := map[string]int64{
		"epoch":              0,
		"before the epoch":   -1,
		"golden window":      1922350200000,
		"with milliseconds":  1922350204456,
		"leap day":           951782400000, // 2000-02-29
		"year 0":             -62167219200000,
		"last ms of 9999":    253402300799999,
		"year 10000":         253402300800000,
		"far past":           -62167219200001,
		"min int64":          math.MinInt64 / 2,
		"end of year 1969":   -86_400_001,
		"1900 is not a leap": -2203891200000, // 1900-03-01
	}
	for name, ms := range tests {
		t.Run(name, func(t *testing.T) {
			got := string(producer.AppendTime(nil, ms))
			if want := reference(ms); got != want {
				t.Errorf("AppendTime(%d) = %s, want %s", ms, got, want)
			}
		})
	}
}

func reference(ms int64) string {
	tm := time.UnixMilli(ms).UTC()
	if ms%1000 == 0 {
		return tm.Format(time.RFC3339)
	}
	return tm.Format("2006-01-02T15:04:05.000Z07:00")
}

func FuzzAppendTime(f *testing.F) {
	f.Add(int64(1922350204456))
	f.Add(int64(-1))
	f.Fuzz(func(t *testing.T, ms int64) {
		if got, want := string(producer.AppendTime(nil, ms)), reference(ms); got != want {
			t.Fatalf("AppendTime(%d) = %s, want %s", ms, got, want)
		}
	})
}

func BenchmarkAppendTime(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = producer.AppendTime(buf[:0], 1922350204456)
	}
}

// TestEncoderReusesWindowsExactly encodes a stream whose windows change,
// repeat and come back with one Encoder, and compares each output with a
// new Encoder's: the window text it keeps must never leak into another
// window's result.
func TestEncoderReusesWindowsExactly(t *testing.T) {
	e := producer.NewEncoder([]string{"total", `a "quoted" name`})
	windows := []windowing.Window{{Start: 0, End: 5000}, {Start: 0, End: 5000}, {Start: 5000, End: 10000},
		{Start: 0, End: 5000}, {Start: -1500, End: 1922350204456}, {Start: 5000, End: 10001}}
	for i, w := range windows {
		r := &windowing.Result{Key: fmt.Sprintf(`{"sid":"sid_%d"}`, i), Window: w, Count: int64(i),
			Aggregates: []record.Value{record.Number(float64(i) + 0.5), record.Number(-float64(i))}, Revision: int64(i), Watermark: w.End}
		fresh := producer.NewEncoder([]string{"total", `a "quoted" name`})
		if got, want := string(e.AppendResult(nil, r)), string(fresh.AppendResult(nil, r)); got != want {
			t.Errorf("result %d: reused encoder wrote\n%s\nwant\n%s", i, got, want)
		}
		if got, want := string(e.AppendKey(nil, r)), string(fresh.AppendKey(nil, r)); got != want {
			t.Errorf("key %d: reused encoder wrote %s, want %s", i, got, want)
		}
	}
	r := &windowing.Result{Key: `{"sid":"x"}`, Window: windowing.Window{Start: 1922350200000, End: 1922350205000},
		Count: 3, Aggregates: []record.Value{record.Number(12), record.Number(math.Copysign(0, -1))}, Firing: windowing.Late, Revision: 1, Watermark: 1922350207000}
	want := `{"key":{"sid":"x"},"window_start":1922350200000,"window_end":1922350205000,"start":"2030-12-01T10:10:00Z",` +
		`"end":"2030-12-01T10:10:05Z","count":3,"aggregates":{"total":12,"a \"quoted\" name":-0},"firing":"late","revision":1,"watermark":1922350207000}`
	if got := string(e.AppendResult(nil, r)); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// FuzzAppendNumber checks the integer fast path against the float
// formatting it replaces.
func FuzzAppendNumber(f *testing.F) {
	for _, v := range []float64{0, math.Copysign(0, -1), 1, -1, 4.5, 1 << 53, 1<<53 + 2, -(1 << 53), 1e20, 1e21, math.NaN(), math.Inf(-1)} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		var want string
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			want = "null"
		case v == math.Trunc(v) && math.Abs(v) < 1e21:
			want = strconv.FormatFloat(v, 'f', -1, 64)
		default:
			want = strconv.FormatFloat(v, 'g', -1, 64)
		}
		if got := string(producer.AppendNumber(nil, v)); got != want {
			t.Fatalf("AppendNumber(%v) = %s, want %s", v, got, want)
		}
	})
}

func BenchmarkEncoder(b *testing.B) {
	e := producer.NewEncoder([]string{"total", "calls"})
	r := &windowing.Result{Key: `{"sid":"sid_42"}`, Window: windowing.Window{Start: 1922350200000, End: 1922350260000}, Count: 300,
		Aggregates: []record.Value{record.Number(1350), record.Number(300)}, Revision: 0, Watermark: 1922350260999}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = e.AppendKey(buf[:0], r)
		buf = e.AppendResult(buf, r)
	}
}
