package producer_test

import (
	"math"
	"testing"
	"time"

	"aggregator/internal/producer"
)

// TestAppendTime compares the hand-written formatter with time.Format.
func TestAppendTime(t *testing.T) {
	tests := map[string]int64{
		"epoch":              0,
		"before the epoch":   -1,
		"SPEC window":        1922350200000,
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
