package producer

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
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

// refusals is the Writer's store of failures: the first produce failure,
// the outputs refused per record (to produce them again alone, or their
// stubs in their place) and the rate limit of the warn lines about them.
// Its methods are safe for concurrent use: the client's promises record
// failures, the engine goroutine and the writer goroutine look outputs up.
type refusals struct {
	results         string // the results topic: its outputs are dropped, not stubbed
	limits          Limits
	seed            maphash.Seed
	now             func() time.Time
	log             zerolog.Logger
	unwritableCount func(topic string) prometheus.Counter

	mu           sync.Mutex // guards what follows
	err          error
	otherFailure bool               // a failure since the last discard or takeRefused was not per record
	refused      map[uint64]refusal // by identity, each output refused per record
	refusedRecs  []*kgo.Record      // refused since the last discard or takeRefused
	anyRefused   atomic.Bool        // refused is not empty

	warnMu   sync.Mutex // guards the rate of unwritable's warn lines
	lastWarn time.Time
	unwarned int
}

// failed counts a produce failure of rec: it keeps the first failure and
// remembers rec if it was refused for itself.
func (rs *refusals) failed(rec *kgo.Record, err error) {
	if perRecord(err) {
		rs.refuse(rec, err)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.err == nil {
		rs.err = fmt.Errorf("produce to %s: %w", rec.Topic, err)
	}
	rs.otherFailure = rs.otherFailure || !perRecord(err)
}

// fail records err as a produce failure, unless one is recorded already.
func (rs *refusals) fail(err error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.err == nil {
		rs.err = err
	}
	rs.otherFailure = true
}

// firstErr returns the first produce failure, or nil.
func (rs *refusals) firstErr() error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.err
}

// onlyRefused is Writer.OnlyRefused.
func (rs *refusals) onlyRefused() bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.err != nil && !rs.otherFailure
}

// committed is Writer.Committed.
func (rs *refusals) committed() {
	if !rs.anyRefused.Load() {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	clear(rs.refused)
	rs.anyRefused.Store(false)
}

// discard is Writer.Discard.
func (rs *refusals) discard() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.err, rs.otherFailure, rs.refusedRecs = nil, false, nil
}

// takeRefused returns the outputs refused per record since the last call
// and forgets the failure, if no other failure happened; else nil.
func (rs *refusals) takeRefused() []*kgo.Record {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	recs, other := rs.refusedRecs, rs.otherFailure
	rs.refusedRecs = nil
	if other || len(recs) == 0 {
		return nil
	}
	rs.err = nil
	return recs
}

// fits reports whether r alone fits in a batch for its topic.
func (rs *refusals) fits(r *kgo.Record) bool {
	return batchSize(r) <= int(rs.limits.Batch(r.Topic))
}

// maxReason bounds the reason header of a stub.
const maxReason = 1024

// stub returns what is written in place of r, which cannot be: its
// headers (the reason cut to maxReason), HeaderTruncated and
// HeaderOriginalBytes, and as much of its key (at most a quarter of the
// room) and value as fits the topic's limit.
func (rs *refusals) stub(r *kgo.Record) *kgo.Record {
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
	room := max(int(rs.limits.Batch(r.Topic))-batchSize(s), 0)
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
func (rs *refusals) identity(r *kgo.Record) uint64 {
	var h maphash.Hash
	h.SetSeed(rs.seed)
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
func (rs *refusals) refuse(r *kgo.Record, err error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.refused == nil {
		rs.refused = map[uint64]refusal{}
	}
	id := rs.identity(r)
	f := rs.refused[id]
	f.why, f.times = err.Error(), f.times+1
	rs.refused[id] = f
	rs.anyRefused.Store(true)
	if r.Topic == rs.results {
		r = &kgo.Record{Topic: r.Topic, Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value), Timestamp: r.Timestamp}
	}
	rs.refusedRecs = append(rs.refusedRecs, r)
}

// refusedBefore returns how r was refused before, if it was.
func (rs *refusals) refusedBefore(r *kgo.Record) refusal {
	if !rs.anyRefused.Load() {
		return refusal{}
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.refused[rs.identity(r)]
}

// replacement returns what to produce in place of r, and whether alone:
// r itself; r alone if it was refused once; its stub if it does not fit
// its topic or was refused alone too; nil for such a result, or if even
// the stub was refused.
func (rs *refusals) replacement(r *kgo.Record) (rec *kgo.Record, alone bool) {
	f := rs.refusedBefore(r)
	fits := rs.fits(r)
	switch {
	case fits && f.times == 0:
		return r, false
	case fits && f.times == 1:
		return r, true
	case fits:
	default:
		f.why = kerr.MessageTooLarge.Message + ": larger than the topic's max.message.bytes"
	}
	rs.unwritable(r, f.why)
	if r.Topic == rs.results || isStub(r) {
		return nil, false // a result is written whole or not at all
	}
	s := rs.stub(r)
	switch sf := rs.refusedBefore(s); sf.times {
	case 0:
		return s, false
	case 1:
		return s, true
	}
	return nil, false
}

// unwritable counts an output written as a stub (late events, dead
// letters) or dropped (results) and logs it, one warn line per minute
// at most (the line says how many it stands for).
func (rs *refusals) unwritable(r *kgo.Record, why string) {
	rs.unwritableCount(r.Topic).Inc()
	rs.warnMu.Lock()
	now := rs.now()
	if !rs.lastWarn.IsZero() && now.Sub(rs.lastWarn) < time.Minute {
		rs.unwarned++
		rs.warnMu.Unlock()
		return
	}
	since := rs.unwarned
	rs.lastWarn, rs.unwarned = now, 0
	rs.warnMu.Unlock()
	e := rs.log.Warn().Str("topic", r.Topic).Str("cause", why).Int("bytes", len(r.Key)+len(r.Value)).
		Int32("max_message_bytes", rs.limits.Batch(r.Topic)).Int("more_since_last_warning", since)
	if r.Topic == rs.results {
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
