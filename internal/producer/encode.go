package producer

import (
	"math"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/ready"
	"aggregator/internal/record"
)

// Header names on late events and dead letters (docs/results.md#the-results-topic).
const (
	HeaderSourceTopic     = "aggregator.source.topic"
	HeaderSourcePartition = "aggregator.source.partition"
	HeaderSourceOffset    = "aggregator.source.offset"
	HeaderEventTime       = "aggregator.event_time"
	HeaderWatermark       = "aggregator.watermark"
	HeaderWindowStart     = "aggregator.window_start"
	HeaderWindowEnd       = "aggregator.window_end"
	HeaderReason          = "aggregator.reason"
)

// ReasonLate is the reason header of a late event.
const ReasonLate = "late"

// An Encoder writes result keys and values. A firing emits every key of a
// window one after the other, so it formats a window's part of the text
// once and reuses it until the window changes; the aggregate names are
// quoted once. Not safe for concurrent use.
type Encoder struct {
	names  [][]byte // `"name":` per aggregate
	win    ready.Window
	text   []byte         // `,"window_start":…,"window_end":…` then `,"start":"…","end":"…"` of win
	keyEnd int            // where the key's part of text ends
	zone   *time.Location // calendar windows: start and end in this zone; nil: UTC
	seq    bool           // count windows: results and keys carry Result.Seq
}

// NewEncoder returns an Encoder for results with the aggregates names.
func NewEncoder(names []string) *Encoder {
	e := &Encoder{}
	for _, n := range names {
		e.names = append(e.names, append(record.AppendQuoted(nil, []byte(n)), ':'))
	}
	return e
}

// window makes text hold the parts of w's text.
func (e *Encoder) window(w ready.Window) {
	if e.text != nil && w == e.win {
		return
	}
	if w.IsGlobal() {
		e.text, e.win = append(e.text[:0], `,"window_start":null,"window_end":null`...), w
		e.keyEnd = len(e.text)
		return
	}
	t := append(e.text[:0], `,"window_start":`...)
	t = strconv.AppendInt(t, w.Start, 10)
	t = append(t, `,"window_end":`...)
	t = strconv.AppendInt(t, w.End, 10)
	e.keyEnd = len(t)
	t = append(t, `,"start":"`...)
	if e.zone != nil {
		t = appendZoned(t, w.Start, e.zone)
		t = append(t, `","end":"`...)
		t = appendZoned(t, w.End, e.zone)
	} else {
		t = AppendTime(t, w.Start)
		t = append(t, `","end":"`...)
		t = AppendTime(t, w.End)
	}
	e.text, e.win = append(t, '"'), w
}

// AppendKey appends the Kafka record key of r: the same for every revision
// of one (group key, window), so a compacted topic keeps the latest result.
func (e *Encoder) AppendKey(dst []byte, r *ready.WindowResult) []byte {
	e.window(r.Window)
	dst = append(dst, `{"key":`...)
	dst = append(dst, r.Key...)
	dst = append(dst, e.text[:e.keyEnd]...)
	if e.seq {
		dst = strconv.AppendInt(append(dst, `,"seq":`...), r.Seq, 10)
	}
	return append(dst, '}')
}

// AppendResult appends the results-topic value of r (docs/results.md#the-results-topic).
func (e *Encoder) AppendResult(dst []byte, r *ready.WindowResult) []byte {
	e.window(r.Window)
	dst = append(dst, `{"key":`...)
	dst = append(dst, r.Key...)
	dst = append(dst, e.text...)
	dst = append(dst, `,"count":`...)
	dst = strconv.AppendInt(dst, r.Count, 10)
	dst = append(dst, `,"aggregates":{`...)
	for i, v := range r.Aggregates {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, e.names[i]...)
		dst = AppendValue(dst, v)
	}
	dst = append(dst, `},"firing":"`...)
	dst = append(dst, r.Firing.String()...)
	dst = append(dst, `","revision":`...)
	dst = strconv.AppendInt(dst, r.Revision, 10)
	if e.seq {
		dst = strconv.AppendInt(append(dst, `,"seq":`...), r.Seq, 10)
	}
	dst = append(dst, `,"watermark":`...)
	dst = strconv.AppendInt(dst, r.Watermark, 10)
	return append(dst, '}')
}

// AppendTime appends ms as RFC 3339 in UTC, with milliseconds only when
// they are not zero. Years 0 to 9999 are formatted by hand (two per result,
// on the hot path); others fall back to time.Format.
func AppendTime(dst []byte, ms int64) []byte {
	const minMs, maxMs = -62167219200000, 253402300800000 // 0000-01-01, 10000-01-01
	if ms < minMs || ms >= maxMs {
		t := time.UnixMilli(ms).UTC()
		if ms%1000 == 0 {
			return t.AppendFormat(dst, time.RFC3339)
		}
		return t.AppendFormat(dst, "2006-01-02T15:04:05.000Z07:00")
	}
	days, rem := floorDiv(ms, 86_400_000)
	y, m, d := civil(days)
	dst = appendDigits(dst, y, 4)
	dst = appendDigits(append(dst, '-'), m, 2)
	dst = appendDigits(append(dst, '-'), d, 2)
	dst = appendDigits(append(dst, 'T'), rem/3_600_000, 2)
	dst = appendDigits(append(dst, ':'), rem/60_000%60, 2)
	dst = appendDigits(append(dst, ':'), rem/1000%60, 2)
	if frac := rem % 1000; frac != 0 {
		dst = appendDigits(append(dst, '.'), frac, 3)
	}
	return append(dst, 'Z')
}

func floorDiv(a, b int64) (q, r int64) {
	q, r = a/b, a%b
	if r < 0 {
		q, r = q-1, r+b
	}
	return q, r
}

// civil converts days since 1970-01-01 to a proleptic Gregorian date
// (Howard Hinnant's days_from_civil, inverted).
func civil(days int64) (y, m, d int64) {
	z := days + 719_468
	era, _ := floorDiv(z, 146_097)
	doe := z - era*146_097
	yoe := (doe - doe/1460 + doe/36_524 - doe/146_096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if m > 12 {
		m -= 12
	}
	y = yoe + era*400
	if m <= 2 {
		y++
	}
	return y, m, d
}

func appendDigits(dst []byte, v int64, width int) []byte {
	var buf [4]byte
	for i := width - 1; i >= 0; i-- {
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return append(dst, buf[:width]...)
}

// AppendValue appends an aggregate value: numbers that are whole print
// without a fraction (4, not 4.0); non-finite numbers, and the null Value
// (an aggregate over no values), print as null.
func AppendValue(dst []byte, v record.Value) []byte {
	if v.Null {
		return append(dst, "null"...)
	}
	if !v.IsNum {
		return append(dst, v.Raw...) // already JSON, quoted by the decoder
	}
	return AppendNumber(dst, v.Num)
}

// AppendNumber appends f as JSON; whole numbers print without a fraction.
func AppendNumber(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return append(dst, "null"...)
	case f == math.Trunc(f) && math.Abs(f) < 1<<53 && (f != 0 || !math.Signbit(f)):
		return strconv.AppendInt(dst, int64(f), 10) // exact, and several times faster than AppendFloat
	case f == math.Trunc(f) && math.Abs(f) < 1e21:
		return strconv.AppendFloat(dst, f, 'f', -1, 64)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// LateHeaders are the provenance headers of a late event.
func LateHeaders(in *ready.Input, eventTime, watermark int64, missed ready.Window) []kgo.RecordHeader {
	return append(sourceHeaders(in),
		header(HeaderEventTime, eventTime),
		header(HeaderWatermark, watermark),
		header(HeaderWindowStart, missed.Start),
		header(HeaderWindowEnd, missed.End),
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(ReasonLate)},
	)
}

// DeadLetterHeaders are the provenance headers of a dead letter; the reason
// is the decoding error.
func DeadLetterHeaders(in *ready.Input, err error) []kgo.RecordHeader {
	return append(sourceHeaders(in), kgo.RecordHeader{Key: HeaderReason, Value: []byte(err.Error())})
}

func sourceHeaders(in *ready.Input) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: HeaderSourceTopic, Value: []byte(in.Topic)},
		header(HeaderSourcePartition, int64(in.KafkaPartition)),
		header(HeaderSourceOffset, in.Offset),
	}
}

func header(key string, v int64) kgo.RecordHeader {
	return kgo.RecordHeader{Key: key, Value: strconv.AppendInt(nil, v, 10)}
}
