package windowing_test

import (
	"fmt"
	"runtime"
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// sessionStream is the session benchmark's stream: keys take turns, 10
// records per ms in all (each key every 100ms), in order; every key
// pauses 300ms after 20 records, past the 250ms gap, so its sessions last
// about 2s. One record in a hundred bridges: the second record of one
// key's session in five comes 150ms before the first one, back in the
// pause, which joins the session before (already fired) to this one.
type sessionStream struct {
	recs []record.Record
}

const (
	sessionKeys = 1000
	sessionGap  = 250
)

func newSessionStream(keys int) *sessionStream {
	values := []record.Value{record.Number(3), {}}
	s := &sessionStream{recs: make([]record.Record, keys)}
	for i := range s.recs {
		key, fields := textKey(fmt.Sprintf("sid_%d", i))
		s.recs[i] = record.Record{Key: key, KeyFields: fields, Values: values}
	}
	return s
}

// at returns record i's key index, event time, and the watermark after it.
func (s *sessionStream) at(i int64) (k int64, t, wm int64) {
	n := int64(len(s.recs))
	k, j := i%n, i/n
	regular := func(j int64) int64 { return j*100 + 200*(j/20) + k*100/n }
	t = regular(j)
	if j%20 == 1 && k%5 == 0 {
		t = regular(j-1) - 150 // bridges: the session before ends at regular(j-2)+250 = regular(j-1)-50
	}
	return k, t, regular(j) - 1
}

func (s *sessionStream) run(b *testing.B, add func(*record.Record), advance func(int64)) {
	b.ReportAllocs()
	i := int64(0)
	for b.Loop() {
		k, t, wm := s.at(i)
		r := &s.recs[k]
		r.Time, r.Offset = t, i
		add(r)
		advance(wm)
		i++
	}
	reportPerRecord(b)
}

// BenchmarkSessions: 1k keys, in order but for 1% bridging records (each
// one a merge of a fired session: a retraction). tumbling is the same
// stream through 1s tumbling windows, the cost to compare with.
func BenchmarkSessions(b *testing.B) {
	b.Run("session", func(b *testing.B) {
		e, err := windowing.NewSessions(windowing.Spec{Kind: windowing.KindSession, Gap: sessionGap, Lateness: 1000, Aggregates: sumCount}, discard{})
		if err != nil {
			b.Fatal(err)
		}
		newSessionStream(sessionKeys).run(b, func(r *record.Record) { e.Add(r) }, e.Advance)
		b.ReportMetric(float64(e.Stats().Merges)/float64(b.N)*100, "%bridging")
	})
	b.Run("tumbling", func(b *testing.B) {
		e := benchEngine(b, params{"tumbling", 1000, 0, 0, 1000, "on_watermark"})
		newSessionStream(sessionKeys).run(b, func(r *record.Record) { e.Add(r) }, e.Advance)
	})
}

// BenchmarkSessionMemory measures heap bytes per open session for
// count+sum: 100k keys with one session each, every per-key cost included.
func BenchmarkSessionMemory(b *testing.B) {
	s := newSessionStream(100_000)
	for b.Loop() {
		e, err := windowing.NewSessions(windowing.Spec{Kind: windowing.KindSession, Gap: sessionGap, Aggregates: sumCount}, discard{})
		if err != nil {
			b.Fatal(err)
		}
		before := heapInUse()
		for i := range s.recs {
			s.recs[i].Time = 0
			e.Add(&s.recs[i])
		}
		after := heapInUse()
		b.ReportMetric(float64(after-before)/float64(e.OpenWindows()), "bytes/session")
		runtime.KeepAlive(e)
	}
}
