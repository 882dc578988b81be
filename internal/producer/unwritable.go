package producer

import (
	"bytes"
	"context"
	"errors"
	"hash/maphash"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// HeaderTruncated ("true") marks a stub: a late event or dead letter too
// large for its topic (or refused with another per-record error), written
// with its headers and as much of its key and value as fits.
// HeaderOriginalBytes is then the size of the original key and value.
const (
	HeaderTruncated     = "aggregator.truncated"
	HeaderOriginalBytes = "aggregator.original_bytes"
)

// Limits are the output topics' max.message.bytes, by topic, read at
// start. A topic not in it gets kgo's default batch bound.
type Limits map[string]int32

// kgo's bound on a record batch, and the range it accepts for one.
const (
	defaultBatchLimit = 1_000_012
	minBatchLimit     = 512
	maxBatchLimit     = 1 << 30
)

// Batch is the largest record batch to produce to topic: the producer's
// kgo.ProducerBatchMaxBytesFn.
func (l Limits) Batch(topic string) int32 {
	n, ok := l[topic]
	if !ok {
		return defaultBatchLimit
	}
	return min(max(n, minBatchLimit), maxBatchLimit)
}

// Overheads of the record batch format (v2) that bound a record's size
// on the wire: the batch header, and at most the varints of one record
// and of one header.
const (
	batchOverhead  = 61
	recordOverhead = 5 + 1 + 10 + 5 + 5 + 5 + 5 // length, attributes, timestamp and offset deltas, key and value lengths, header count
	headerOverhead = 5 + 5
)

// batchSize bounds the size of a batch holding only r.
func batchSize(r *kgo.Record) int {
	n := batchOverhead + recordOverhead + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += headerOverhead + len(h.Key) + len(h.Value)
	}
	return n
}

// fits reports whether r alone fits in a batch for its topic.
func (w *Writer) fits(r *kgo.Record) bool {
	return batchSize(r) <= int(w.limits.Batch(r.Topic))
}

// maxReason bounds the reason header of a stub.
const maxReason = 1024

// stub returns what is written in place of r, which cannot be: its
// headers (the reason cut to maxReason), HeaderTruncated and
// HeaderOriginalBytes, and as much of its key (at most a quarter of the
// room) and value as fits the topic's limit.
func (w *Writer) stub(r *kgo.Record) *kgo.Record {
	s := &kgo.Record{Topic: r.Topic, Timestamp: r.Timestamp,
		Headers: make([]kgo.RecordHeader, 0, len(r.Headers)+2)}
	for _, h := range r.Headers {
		if h.Key == HeaderReason && len(h.Value) > maxReason {
			h.Value = h.Value[:maxReason]
		}
		s.Headers = append(s.Headers, h)
	}
	s.Headers = append(s.Headers, kgo.RecordHeader{Key: HeaderTruncated, Value: []byte("true")},
		header(HeaderOriginalBytes, int64(len(r.Key)+len(r.Value))))
	room := max(int(w.limits.Batch(r.Topic))-batchSize(s), 0)
	s.Key = r.Key[:min(len(r.Key), room/4)]
	s.Value = r.Value[:min(len(r.Value), room-len(s.Key))]
	return s
}

func isStub(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == HeaderTruncated {
			return true
		}
	}
	return false
}

// perRecord reports whether a produce error is about the record itself,
// so that producing it again fails again: only a stub (or, for a result,
// nothing) can be written in its place.
func perRecord(err error) bool {
	for _, e := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord,
		kerr.CorruptMessage, kerr.InvalidTimestamp} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// identity identifies an output across a reprocessing: the same input
// gives the same topic, key and value (and number of headers, which tells
// a stub that kept everything from its original).
func (w *Writer) identity(r *kgo.Record) uint64 {
	var h maphash.Hash
	h.SetSeed(w.seed)
	h.WriteString(r.Topic)
	h.WriteByte(0)
	_, _ = h.Write(strconv.AppendInt(nil, int64(len(r.Headers)), 10))
	h.WriteByte(0)
	_, _ = h.Write(strconv.AppendInt(nil, int64(len(r.Key)), 10))
	h.WriteByte(0)
	_, _ = h.Write(r.Key)
	_, _ = h.Write(r.Value)
	return h.Sum64()
}

// A refusal is what the Writer remembers of an output refused per
// record: a broker refuses a whole batch for one bad record, so an output
// refused once is produced again alone (its own batch), and only one
// refused alone as well is replaced.
type refusal struct {
	why   string
	times int
}

// refuse remembers that r failed with a per-record error, for the
// reprocessing that follows an abort (exactly_once) or RewriteRefused
// (at_least_once). A result's record is reused once acknowledged, so it
// is copied.
func (w *Writer) refuse(r *kgo.Record, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.refused == nil {
		w.refused = map[uint64]refusal{}
	}
	id := w.identity(r)
	f := w.refused[id]
	f.why, f.times = err.Error(), f.times+1
	w.refused[id] = f
	w.anyRefused.Store(true)
	if r.Topic == w.sink.ResultsTopic {
		r = &kgo.Record{Topic: r.Topic, Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value), Timestamp: r.Timestamp}
	}
	w.refusedRecs = append(w.refusedRecs, r)
}

// refusedBefore returns how r was refused before, if it was.
func (w *Writer) refusedBefore(r *kgo.Record) refusal {
	if !w.anyRefused.Load() {
		return refusal{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refused[w.identity(r)]
}

// RewriteRefused produces again, each alone, the outputs refused with a
// per-record error since the last call, or in their place the stubs of
// those refused alone already (results: nothing); if no other failure
// happened, it forgets the failure and reports true. With at_least_once,
// a flush that failed for those alone is followed by this and another
// flush. No produce may be under way.
func (w *Writer) RewriteRefused(ctx context.Context) bool {
	w.mu.Lock()
	recs, other := w.refusedRecs, w.otherFailure
	w.refusedRecs = nil
	if other || len(recs) == 0 {
		w.mu.Unlock()
		return false
	}
	w.err = nil
	w.mu.Unlock()
	for _, r := range recs {
		done := w.deadDone
		switch r.Topic {
		case w.sink.ResultsTopic:
			done = w.copiedResultDone
		case w.sink.LateTopic:
			done = w.lateDone
		}
		if rec, alone := w.replacement(r); rec != nil {
			w.produce(ctx, rec, done, alone)
		}
	}
	return true
}

// replacement returns what to produce in place of r, and whether alone:
// r itself; r alone if it was refused once; its stub if it does not fit
// its topic or was refused alone too; nil for such a result, or if even
// the stub was refused.
func (w *Writer) replacement(r *kgo.Record) (rec *kgo.Record, alone bool) {
	f := w.refusedBefore(r)
	fits := w.fits(r)
	switch {
	case fits && f.times == 0:
		return r, false
	case fits && f.times == 1:
		return r, true
	case fits:
	default:
		f.why = kerr.MessageTooLarge.Message + ": larger than the topic's max.message.bytes"
	}
	w.unwritable(r, f.why)
	if r.Topic == w.sink.ResultsTopic || isStub(r) {
		return nil, false // a result is written whole or not at all
	}
	s := w.stub(r)
	switch sf := w.refusedBefore(s); sf.times {
	case 0:
		return s, false
	case 1:
		return s, true
	}
	return nil, false
}

// produce produces r, alone in its batch if alone: the client's buffer is
// flushed before and after.
func (w *Writer) produce(ctx context.Context, r *kgo.Record, done func(*kgo.Record, error), alone bool) {
	f, ok := w.cl.(interface{ Flush(context.Context) error })
	if !alone || !ok {
		w.cl.Produce(ctx, r, done)
		return
	}
	_ = f.Flush(ctx) // a failure is the promise's to report
	w.cl.Produce(ctx, r, done)
	_ = f.Flush(ctx)
}

// unwritable counts an output written as a stub (late events, dead
// letters) or dropped (results) and logs it, one warn line per minute
// at most (the line says how many it stands for).
func (w *Writer) unwritable(r *kgo.Record, why string) {
	w.unwritableCount(r.Topic).Inc()
	w.warnMu.Lock()
	now := w.now()
	if !w.lastWarn.IsZero() && now.Sub(w.lastWarn) < time.Minute {
		w.unwarned++
		w.warnMu.Unlock()
		return
	}
	since := w.unwarned
	w.lastWarn, w.unwarned = now, 0
	w.warnMu.Unlock()
	e := w.log.Warn().Str("topic", r.Topic).Str("cause", why).Int("bytes", len(r.Key)+len(r.Value)).
		Int32("max_message_bytes", w.limits.Batch(r.Topic)).Int("more_since_last_warning", since)
	if r.Topic == w.sink.ResultsTopic {
		e.Bytes("key", r.Key).Msg("result cannot be written: dropped (counted in aggregator_unwritable_outputs_total)")
		return
	}
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderSourceTopic:
			e = e.Bytes("source_topic", h.Value)
		case HeaderSourcePartition:
			e = e.RawJSON("partition", h.Value) // decimal digits
		case HeaderSourceOffset:
			e = e.RawJSON("offset", h.Value)
		}
	}
	e.Msg("record cannot be written whole: written as a stub with aggregator.truncated=true")
}
