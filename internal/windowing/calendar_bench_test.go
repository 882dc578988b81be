package windowing_test

import (
	"fmt"
	"testing"
	"time"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// windowEngine is what the benchmarks feed: Engine or Sessions.
type windowEngine interface {
	Add(rec *record.Record) windowing.AddResult
	Advance(wm int64)
}

// dayStream feeds 1,000 keys in turn, one record every 10 s of event
// time, in order: about 8.6 records per key per day, as the tumbling
// benchmark's 10 per window.
func dayStream(b *testing.B, e windowEngine) {
	const keys, step = 1000, 10_000
	recs := make([]record.Record, keys)
	values := []record.Value{record.Number(3), {}}
	for i := range recs {
		key, fields := textKey(fmt.Sprintf("sid_%d", i))
		recs[i] = record.Record{Key: key, KeyFields: fields, Values: values}
	}
	base := time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	i := int64(0)
	feed := func() {
		r := &recs[i%keys]
		r.Time, r.Offset = base+i*step, i
		e.Add(r)
		e.Advance(r.Time - 1)
		i++
	}
	for i*step < 2*86_400_000 { // two days: every key has its window open
		feed()
	}
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		feed()
	}
	reportPerRecord(b)
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/record")
}

// BenchmarkCalendarDay: calendar days in Europe/Berlin (across the March
// DST change) against tumbling 24h windows, on the same stream.
func BenchmarkCalendarDay(b *testing.B) {
	b.Run("tumbling 24h", func(b *testing.B) {
		e, err := windowing.NewEngine(params{"tumbling", 86_400_000, 0, 0, 0, "on_watermark"}.spec(sumCount...), discard{})
		if err != nil {
			b.Fatal(err)
		}
		dayStream(b, e)
	})
	b.Run("calendar day", func(b *testing.B) {
		loc, err := time.LoadLocation("Europe/Berlin")
		if err != nil {
			b.Fatal(err)
		}
		e, err := windowing.NewEngine(windowing.Spec{Kind: windowing.KindCalendar, Calendar: windowing.CalendarDay, Zone: loc, Aggregates: sumCount}, discard{})
		if err != nil {
			b.Fatal(err)
		}
		dayStream(b, e)
	})
}
