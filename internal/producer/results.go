package producer

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/ready"
)

// resultsTopic is the results topic's encoding (JSON keys, JSON or Avro
// values), its records (reused once acknowledged) and their promise.
// enc, values and pool are the writer goroutine's; fetched and done the
// engine goroutine's.
type resultsTopic struct {
	name    string
	enc     *Encoder              // keys, and JSON values
	values  ResultEncoder         // result values: enc, or Avro (EncodeResults)
	firings [6]prometheus.Counter // by ready.Firing
	// uncommitted counts, with exactly_once, the firings of the open
	// transaction: they reach firings at its commit and are forgotten at
	// its abort (its results are computed again).
	uncommitted *[6]int64
	metrics     topicMetrics
	latency     prometheus.Observer
	fetched     time.Time                // when the records being processed were fetched
	done        func(*kgo.Record, error) // the promise of results caused by those records
	copiedDone  func(*kgo.Record, error) // of a result produced again by RewriteRefused
	pool        sync.Pool                // *resultRecord: a result's record is reused once acknowledged
	// version is the header aggregator.config_version of the last
	// result's generation (shared by the records of that generation: a
	// header is not allocated per result), of versionOf.
	version   []kgo.RecordHeader
	versionOf int64
	// current is the config's state.config_version, whose results values
	// encodes; gens the encoders of other generations (Writer.Generation:
	// set by the engine goroutine, read by the writer goroutine), of which
	// lastGen, lastEnc are the last one used.
	current int64
	gens    atomic.Pointer[map[int64]ResultEncoder]
	lastGen int64
	lastEnc ResultEncoder
}

// encoder is the encoder of results of generation v: values, unless
// another generation's was given.
func (t *resultsTopic) encoder(v int64) ResultEncoder {
	if v == t.current {
		return t.values
	}
	if t.lastEnc != nil && t.lastGen == v {
		return t.lastEnc
	}
	if m := t.gens.Load(); m != nil {
		if enc, ok := (*m)[v]; ok {
			t.lastGen, t.lastEnc = v, enc
			return enc
		}
	}
	return t.values
}

// HeaderConfigVersion is a result's header that names the
// state.config_version of the generation of windows that computed it
// (docs/results.md#the-results-topic).
const HeaderConfigVersion = "aggregator.config_version"

// versionHeader returns the headers of a result of generation v.
func (t *resultsTopic) versionHeader(v int64) []kgo.RecordHeader {
	if t.version == nil || t.versionOf != v {
		t.version = []kgo.RecordHeader{{Key: HeaderConfigVersion, Value: strconv.AppendInt(nil, v, 10)}}
		t.versionOf = v
	}
	return t.version[:1:1]
}

// resultSize is the room for a result's key and value that comes with its
// record: the record and the bytes are one allocation (512 bytes, a size
// class). A longer result grows out of it.
const resultSize = 352

// resultRecord is a result's Kafka record and the bytes of its key and value.
type resultRecord struct {
	rec kgo.Record
	buf [resultSize]byte
}

// record returns r's record, timestamped now, in a reused resultRecord:
// a retraction's is a tombstone under the superseded session's key.
func (t *resultsTopic) record(r *ready.WindowResult, now time.Time) *resultRecord {
	out := t.pool.Get().(*resultRecord)
	k := t.enc.AppendKey(out.buf[:0], r)
	n := len(k)
	if r.Firing == ready.Retract {
		out.rec = kgo.Record{Topic: t.name, Key: k[:n:n], Timestamp: now, Headers: t.versionHeader(r.Generation)}
		return out
	}
	v := t.encoder(r.Generation).AppendResult(k, r)
	out.rec = kgo.Record{Topic: t.name, Key: v[:n:n], Value: v[n:], Timestamp: now, Headers: t.versionHeader(r.Generation)}
	return out
}

// release makes out reusable: its record was acknowledged, or not produced.
func (t *resultsTopic) release(out *resultRecord) {
	out.rec = kgo.Record{}
	t.pool.Put(out)
}
