package producer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/ready"
)

// repartitionTopic is where stage 1 of source.partitioning repartition
// writes: its data records and groups go to the partition stage 1 picked
// (ready.Repart.Partition: the one Kafka's default partitioner picks for
// their group key), its markers to every partition. The client sends a
// record of it to the partition it names.
type repartitionTopic struct {
	name       string
	partitions int32
	metrics    topicMetrics
	bytes      prometheus.Counter
	records    [2]prometheus.Counter // by kind: record, partial
	folded     prometheus.Counter
	done       func(*kgo.Record, error)
	// Records, headers and their bytes are cut from chunks (the engine
	// goroutine's): four allocations per record were most of stage 1's
	// garbage. A chunk is freed once the client let go of all its records.
	recs []kgo.Record
	hdrs []kgo.RecordHeader
	buf  []byte
}

const (
	chunkRecords = 256
	chunkBytes   = 64 << 10
)

// record returns a fresh record of the repartition topic.
func (t *repartitionTopic) record() *kgo.Record {
	if len(t.recs) == 0 {
		t.recs = make([]kgo.Record, chunkRecords)
	}
	r := &t.recs[0]
	r.Topic, t.recs = t.name, t.recs[1:]
	return r
}

// header returns room for one header that the client may hold.
func (t *repartitionTopic) header() []kgo.RecordHeader {
	if len(t.hdrs) == 0 {
		t.hdrs = make([]kgo.RecordHeader, chunkRecords)
	}
	h := t.hdrs[:0:1]
	t.hdrs = t.hdrs[1:]
	return h
}

// room returns room for n bytes (appended to from empty) that the client
// may hold until it acknowledges the record.
func (t *repartitionTopic) room(n int) []byte {
	if cap(t.buf)-len(t.buf) < n {
		t.buf = make([]byte, 0, max(chunkBytes, n))
	}
	return t.buf[len(t.buf):len(t.buf)]
}

// keep takes b, appended to room's slice, out of the chunk (unless it
// outgrew the room and has an array of its own).
func (t *repartitionTopic) keep(b []byte) []byte {
	if free := t.buf[len(t.buf):cap(t.buf)]; len(b) > 0 && len(free) >= len(b) && &free[0] == &b[0] {
		t.buf = t.buf[:len(t.buf)+len(b)]
	}
	return b[:len(b):len(b)]
}

// SetRepartitionPartitions sets the repartition topic's partition count,
// once it is known (at connect).
func (w *Writer) SetRepartitionPartitions(n int32) { w.repart.partitions = n }

// repartitionData queues an accepted input record or a group of partials
// for the repartition topic, in the partition stage 1 picked: a record
// has its group key as the key, and the bytes stage 1 encoded
// (ready.Repart.Encoded) as its value, or in the header it names with the
// input value as the value (format 1); a group has no key. The key is
// copied now: the input is valid only during the call.
func (w *Writer) repartitionData(r *ready.Repart) {
	t := &w.repart
	var key []byte
	if r.Folded == 0 {
		key = t.keep(append(t.room(len(r.Key)), r.Key...))
		t.records[0].Inc()
	} else {
		t.records[1].Inc()
		t.folded.Add(float64(r.Folded))
	}
	rec := t.record()
	rec.Key, rec.Timestamp, rec.Partition = key, time.UnixMilli(r.In.Timestamp), r.Partition
	if r.Header != "" {
		rec.Value, rec.Headers = r.In.Value, append(t.header(), kgo.RecordHeader{Key: r.Header, Value: r.Encoded})
		t.bytes.Add(float64(len(rec.Key) + len(rec.Value) + len(r.Header) + len(r.Encoded)))
	} else {
		rec.Value = r.Encoded
		t.bytes.Add(float64(len(rec.Key) + len(rec.Value)))
	}
	w.add(output{rec: rec, done: w.repart.done})
}

// repartitionMarker queues a watermark marker for every repartition partition.
func (w *Writer) repartitionMarker(r *ready.Repart) {
	h := []kgo.RecordHeader{{Key: r.Header, Value: r.Encoded}}
	for p := range w.repart.partitions {
		rec := &kgo.Record{Topic: w.repart.name, Partition: p, Headers: h}
		w.q.cur.outs = append(w.q.cur.outs, output{rec: rec, done: w.repart.done})
	}
	w.repart.bytes.Add(float64(int(w.repart.partitions) * (len(r.Header) + len(r.Encoded))))
	w.sendIfFull()
}
