package demo

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// TimeLayout is how the generator writes callTime, and (fractional
// seconds being accepted) what the demo config parses it with.
const TimeLayout = "2006-01-02 15:04:05.000"

// Class says what the pipeline is meant to do with a generated record.
type Class uint8

const (
	OnTime    Class = iota // within the out-of-orderness bound: aggregated
	Straggler              // behind the watermark but within allowed lateness: a late firing
	TooLate                // past every window's cleanup: goes to the late topic
	Malformed              // bad JSON, a missing field or a non-numeric duration (Avro: not in the wire format, an unknown schema, a truncated body): dead letter
	Filtered               // callType "fail": removed by source.filter
)

func (c Class) String() string {
	return [...]string{"on_time", "straggler", "too_late", "malformed", "filtered"}[c]
}

// GeneratorConfig shapes the synthetic stream. The fractions are the
// probability of each class per record; the rest are OnTime.
type GeneratorConfig struct {
	Keys              int     // distinct sids: sid_0 .. sid_{Keys-1}
	LateFraction      float64 // TooLate
	StragglerFraction float64
	MalformedFraction float64
	FilteredFraction  float64
	// Speed is event-time seconds per wall-clock second (1 = real time).
	Speed float64
	// Origin is what the event clock reads at start (zero: start itself):
	// a demo of calendar days starts its clock just before a local
	// midnight.
	Origin time.Time
	// MaxDisorder bounds how far an OnTime record lags the event clock; it
	// must stay below the pipeline's max_out_of_orderness.
	MaxDisorder time.Duration
	// The pipeline's settings, to place Stragglers and TooLate records.
	OutOfOrderness, Lateness, WindowSize time.Duration
	// LateMargin puts TooLate records this much further back (event
	// time), and LateAfter makes none until the event clock has run that
	// long (the first records are OnTime instead): a TooLate record is
	// then late whatever order a consumer reads the partitions in, as
	// long as it reads none of them more than LateMargin behind the
	// others, and every partition has a record before the first one.
	// Zero: a lateness and two windows back, from the first record.
	LateMargin, LateAfter time.Duration
	Seed                  uint64
	// AvroSchemaID, when not 0, makes values Avro in the wire format with
	// this schema id (AvroSchema in the registry) instead of JSON.
	AvroSchemaID uint32
	// LateGate, when not nil, holds TooLate records back (they are OnTime
	// instead) until it returns true: the demo opens it once every
	// instance has a watermark, which a record judged earlier would meet
	// at minus infinity.
	LateGate func() bool
	// KeyByCall makes each record's Kafka key a call id (call_0, call_1,
	// ...) instead of its sid: the producer's partitioner then spreads
	// every sid over every partition.
	KeyByCall bool
}

// Record is one generated Kafka record.
type Record struct {
	Key, Value []byte
	EventTime  time.Time // what callTime says (or would say, if malformed)
	Class      Class
}

// Generator makes call records whose event clock runs from start at Speed
// times the wall clock passed to Next.
type Generator struct {
	cfg   GeneratorConfig
	rng   *rand.Rand
	start time.Time
	calls int64 // records made, for KeyByCall
}

// NewGenerator returns a Generator whose event clock reads start when the
// wall clock does.
func NewGenerator(cfg GeneratorConfig, start time.Time) *Generator {
	return &Generator{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), start: start}
}

// EventClock is the event time at wall-clock now.
func (g *Generator) EventClock(now time.Time) time.Time {
	origin := g.start
	if !g.cfg.Origin.IsZero() {
		origin = g.cfg.Origin
	}
	return origin.Add(time.Duration(float64(now.Sub(g.start)) * g.cfg.Speed))
}

// Next returns the record generated at wall-clock now.
func (g *Generator) Next(now time.Time) Record {
	sid := "sid_" + strconv.Itoa(g.rng.IntN(max(g.cfg.Keys, 1)))
	key := []byte(sid)
	if g.cfg.KeyByCall {
		key = strconv.AppendInt([]byte("call_"), g.calls, 10)
	}
	g.calls++
	class := g.class()
	if class == TooLate && (float64(now.Sub(g.start))*g.cfg.Speed < float64(g.cfg.LateAfter) || g.cfg.LateGate != nil && !g.cfg.LateGate()) {
		class = OnTime
	}
	at := g.eventTime(g.EventClock(now), class)
	callType := "success"
	if class == Filtered {
		callType = "fail"
	}
	d := 1 + g.rng.IntN(600)
	if g.cfg.AvroSchemaID != 0 {
		value := avroValue(g.cfg.AvroSchemaID, sid, callType, at, int64(d))
		if class == Malformed {
			value = g.malformedAvro(sid, at, int64(d))
		}
		return Record{Key: key, Value: value, EventTime: at, Class: class}
	}
	duration := strconv.Itoa(d)
	value := fmt.Sprintf(`{"sid":%q,"callType":%q,"callTime":%q,"duration":%s}`,
		sid, callType, at.UTC().Format(TimeLayout), duration)
	if class == Malformed {
		value = g.malformed(sid, at, duration)
	}
	return Record{Key: key, Value: []byte(value), EventTime: at, Class: class}
}

func (g *Generator) class() Class {
	u := g.rng.Float64()
	for _, c := range []struct {
		class Class
		p     float64
	}{
		{TooLate, g.cfg.LateFraction},
		{Straggler, g.cfg.StragglerFraction},
		{Malformed, g.cfg.MalformedFraction},
		{Filtered, g.cfg.FilteredFraction},
	} {
		if u < c.p {
			return c.class
		}
		u -= c.p
	}
	return OnTime
}

// eventTime places a record relative to the event clock. The watermark
// trails the clock by OutOfOrderness and 1ms. A TooLate record (a lateness
// and two windows further back) is past the cleanup of every window it
// belongs to (LateMargin further back); a Straggler is behind the
// watermark but within lateness.
func (g *Generator) eventTime(clock time.Time, class Class) time.Time {
	clock = clock.Truncate(time.Millisecond)
	switch class {
	case Straggler:
		return time.UnixMilli(g.straggler(clock.UnixMilli() - g.cfg.OutOfOrderness.Milliseconds() - 1))
	case TooLate:
		return clock.Add(-g.cfg.OutOfOrderness - g.cfg.Lateness - 2*g.cfg.WindowSize - g.cfg.LateMargin)
	}
	if ms := g.cfg.MaxDisorder.Milliseconds(); ms > 0 {
		return clock.Add(-time.Duration(g.rng.Int64N(ms)) * time.Millisecond)
	}
	return clock
}

// straggler returns a time in the latest window that has fired at
// watermark wm, while that window is within its lateness, so the record
// makes a late firing; otherwise wm itself. Windows are tumbling
// WindowSize windows with offset 0.
func (g *Generator) straggler(wm int64) int64 {
	size, lateness := g.cfg.WindowSize.Milliseconds(), g.cfg.Lateness.Milliseconds()
	if size <= 0 {
		return wm
	}
	end := wm + 1 - ((wm+1)%size+size)%size // end of the latest window with maxTimestamp <= wm
	if end-1+lateness <= wm {
		return wm
	}
	return end - 1 - g.rng.Int64N(size)
}

// malformed returns one of the three ways a record can fail to decode.
func (g *Generator) malformed(sid string, at time.Time, duration string) string {
	switch g.rng.IntN(3) {
	case 0: // truncated JSON
		return fmt.Sprintf(`{"sid":%q,"callType":"success","callTime":%q,"dura`, sid, at.UTC().Format(TimeLayout))
	case 1: // no event time
		return fmt.Sprintf(`{"sid":%q,"callType":"success","duration":%s}`, sid, duration)
	}
	return fmt.Sprintf(`{"sid":%q,"callType":"success","callTime":%q,"duration":"%s seconds"}`,
		sid, at.UTC().Format(TimeLayout), duration)
}

// Due is how many records a source at rate records/s should have sent
// after elapsed: the producer loop sends Due minus what it has sent, so
// the rate holds however late its ticks come.
func Due(elapsed time.Duration, rate float64) int64 {
	if elapsed <= 0 || rate <= 0 {
		return 0
	}
	return int64(elapsed.Seconds() * rate)
}
