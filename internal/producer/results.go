package producer

import (
	"sync"
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
	name       string
	enc        *Encoder              // keys, and JSON values
	values     ResultEncoder         // result values: enc, or Avro (EncodeResults)
	firings    [6]prometheus.Counter // by ready.Firing
	metrics    topicMetrics
	latency    prometheus.Observer
	fetched    time.Time                // when the records being processed were fetched
	done       func(*kgo.Record, error) // the promise of results caused by those records
	copiedDone func(*kgo.Record, error) // of a result produced again by RewriteRefused
	pool       sync.Pool                // *resultRecord: a result's record is reused once acknowledged
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
		out.rec = kgo.Record{Topic: t.name, Key: k[:n:n], Timestamp: now}
		return out
	}
	v := t.values.AppendResult(k, r)
	out.rec = kgo.Record{Topic: t.name, Key: v[:n:n], Value: v[n:], Timestamp: now}
	return out
}

// release makes out reusable: its record was acknowledged, or not produced.
func (t *resultsTopic) release(out *resultRecord) {
	out.rec = kgo.Record{}
	t.pool.Put(out)
}
