package producer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/metrics"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// refusing keeps copies of the records it takes and fails those that
// refuse picks, once each (as a broker refuses a record, not a retry).
type refusing struct {
	mu      sync.Mutex
	recs    []*kgo.Record
	refuse  func(*kgo.Record) error
	flushes int
}

func (f *refusing) Flush(context.Context) error {
	f.flushes++
	return nil
}

func (f *refusing) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	if err := f.refuse(r); err != nil {
		promise(r, err)
		return
	}
	c := *r
	c.Key, c.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
	f.mu.Lock()
	f.recs = append(f.recs, &c)
	f.mu.Unlock()
	promise(r, nil)
}

func headerMap(r *kgo.Record) map[string]string {
	m := map[string]string{}
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

// batchBound is the size of a batch holding only r, as the Writer bounds it.
func batchBound(r *kgo.Record) int {
	n := 61 + 36 + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += 10 + len(h.Key) + len(h.Value)
	}
	return n
}

// A dead letter larger than its topic's max.message.bytes is written as a
// stub: its headers, aggregator.truncated, its size, and the start of its
// key and value, within the limit. One that fits is written whole.
func TestWriterStubsOversizedRecords(t *testing.T) {
	cl := &fakeClient{}
	m := metrics.New(prometheus.NewRegistry())
	limits := producer.Limits{"dlq": 1024, "late": 1 << 20}
	w := producer.NewWriter(cl, sinkConfig(), m, time.Now, limits, zerolog.Nop())
	t.Cleanup(w.Close)
	big := &ready.Input{Topic: "calls", KafkaPartition: 3, Offset: 42, Key: []byte("key-1"), Value: bytes.Repeat([]byte("x"), 5000), Timestamp: 77}
	small := &ready.Input{Topic: "calls", KafkaPartition: 3, Offset: 43, Key: []byte("key-2"), Value: []byte("{}")}
	w.DeadLetter(big, &record.DecodeError{Reason: "bad_json"})
	w.DeadLetter(small, &record.DecodeError{Reason: "bad_json"})
	w.Late(big, 1, 2, windowing.Window{Start: 0, End: 5})
	w.Sync()
	if err := w.Err(); err != nil || len(cl.recs) != 3 {
		t.Fatalf("Err() = %v with %d records, want nil with 3", err, len(cl.recs))
	}
	stub, whole, late := cl.recs[0], cl.recs[1], cl.recs[2]
	h := headerMap(stub)
	want := map[string]string{producer.HeaderTruncated: "true", producer.HeaderOriginalBytes: strconv.Itoa(5005),
		producer.HeaderSourcePartition: "3", producer.HeaderSourceOffset: "42", producer.HeaderSourceTopic: "calls"}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("stub header %s = %q, want %q", k, h[k], v)
		}
	}
	if !strings.Contains(h[producer.HeaderReason], "bad_json") {
		t.Errorf("stub reason = %q, want the decoding error", h[producer.HeaderReason])
	}
	if n := batchBound(stub); n > 1024 || len(stub.Value) < 500 || !bytes.HasPrefix(big.Value, stub.Value) || string(stub.Key) != "key-1" || stub.Timestamp.UnixMilli() != 77 {
		t.Errorf("stub = key %q, %d bytes of value (batch %d bytes), ts %d; want the key, the value's start, within 1024 bytes, ts 77",
			stub.Key, len(stub.Value), n, stub.Timestamp.UnixMilli())
	}
	if _, ok := headerMap(whole)[producer.HeaderTruncated]; ok || string(whole.Value) != "{}" {
		t.Errorf("a dead letter that fits = %q with headers %v, want it whole", whole.Value, headerMap(whole))
	}
	if len(late.Value) != 5000 {
		t.Errorf("late event of 5000 bytes to a 1 MiB topic = %d bytes, want it whole", len(late.Value))
	}
	if got := value(m.Unwritable.WithLabelValues("dlq")); got != 1 {
		t.Errorf("unwritable_outputs{dlq} = %v, want 1", got)
	}
}

// A result too large for the results topic is dropped and counted; the
// Writer goes on.
func TestWriterDropsOversizedResult(t *testing.T) {
	cl := &fakeClient{}
	m := metrics.New(prometheus.NewRegistry())
	w := producer.NewWriter(cl, resultConfig(), m, time.Now, producer.Limits{"res": 600}, zerolog.Nop())
	t.Cleanup(w.Close)
	huge := sampleResult()
	huge.Key = `{"sid":"` + strings.Repeat("s", 1000) + `"}`
	w.Result(huge)
	w.Result(sampleResult())
	w.Sync()
	if err := w.Err(); err != nil || len(cl.recs) != 1 || strings.Contains(string(cl.recs[0].Key), "sss") {
		t.Fatalf("Err() = %v with %d records, want nil and only the small result", err, len(cl.recs))
	}
	if got := value(m.Unwritable.WithLabelValues("res")); got != 1 {
		t.Errorf("unwritable_outputs{res} = %v, want 1", got)
	}
}

// A record the broker refuses for itself fails the Writer (the
// transaction aborts). Processed again, it is produced alone in its
// batch (the broker refuses whole batches for one record); refused alone
// too, it is written as a stub. With at_least_once, RewriteRefused does
// the same at once.
func TestWriterRefusedRecord(t *testing.T) {
	in := &ready.Input{Topic: "calls", KafkaPartition: 1, Offset: 9, Key: []byte("k"), Value: []byte("not json")}
	// refuseDLQ refuses the first n dead letters that are not stubs.
	refuseDLQ := func(n int) func(*kgo.Record) error {
		return func(r *kgo.Record) error {
			if r.Topic != "dlq" || n == 0 || headerMap(r)[producer.HeaderTruncated] != "" {
				return nil
			}
			n--
			return kerr.InvalidRecord
		}
	}
	dead := func(w *producer.Writer) error {
		w.DeadLetter(in, &record.DecodeError{Reason: "bad_json"})
		w.Sync()
		return w.Err()
	}
	t.Run("refused once", func(t *testing.T) {
		cl := &refusing{refuse: refuseDLQ(1)}
		w := newWriter(t, cl, sinkConfig(), nil, time.Now)
		if err := dead(w); !errors.Is(err, kerr.InvalidRecord) || !w.OnlyRefused() {
			t.Fatalf("Err() = %v, OnlyRefused() = %v; want INVALID_RECORD, true", err, w.OnlyRefused())
		}
		w.Discard() // the transaction aborted
		if err := dead(w); err != nil || len(cl.recs) != 1 || headerMap(cl.recs[0])[producer.HeaderTruncated] != "" || cl.flushes != 2 {
			t.Fatalf("processed again: Err() = %v, %d records, %d flushes; want nil, the record whole, alone (2 flushes)", err, len(cl.recs), cl.flushes)
		}
		// Once committed, the refusal is forgotten: the same output again
		// (another input, equal) goes in a batch like any other.
		w.Committed()
		if err := dead(w); err != nil || len(cl.recs) != 2 || cl.flushes != 2 {
			t.Fatalf("after Committed: Err() = %v, %d records, %d flushes; want nil, 2 records, no flush of its own (2 flushes)", err, len(cl.recs), cl.flushes)
		}
	})
	t.Run("refused alone too", func(t *testing.T) {
		cl := &refusing{refuse: refuseDLQ(2)}
		w := newWriter(t, cl, sinkConfig(), nil, time.Now)
		for range 2 {
			if err := dead(w); !errors.Is(err, kerr.InvalidRecord) {
				t.Fatalf("Err() = %v, want INVALID_RECORD", err)
			}
			w.Discard()
		}
		if err := dead(w); err != nil || len(cl.recs) != 1 || headerMap(cl.recs[0])[producer.HeaderTruncated] != "true" {
			t.Fatalf("processed a third time: Err() = %v, %d records; want nil and one stub", err, len(cl.recs))
		}
	})
	t.Run("at_least_once", func(t *testing.T) {
		cl := &refusing{refuse: refuseDLQ(2)}
		w := newWriter(t, cl, sinkConfig(), nil, time.Now)
		_ = dead(w)
		for range 2 {
			if !w.RewriteRefused(context.Background()) {
				t.Fatalf("RewriteRefused() = false after INVALID_RECORD, want true")
			}
		}
		if w.Err() != nil || len(cl.recs) != 1 || headerMap(cl.recs[0])[producer.HeaderTruncated] != "true" {
			t.Fatalf("after RewriteRefused twice: Err() = %v, %d records; want nil and one stub", w.Err(), len(cl.recs))
		}
	})
	t.Run("other failure", func(t *testing.T) {
		cl := &refusing{refuse: func(*kgo.Record) error { return kerr.TopicAuthorizationFailed }}
		w := newWriter(t, cl, sinkConfig(), nil, time.Now)
		_ = dead(w)
		if w.OnlyRefused() || w.RewriteRefused(context.Background()) || !errors.Is(w.Err(), kerr.TopicAuthorizationFailed) {
			t.Errorf("after TOPIC_AUTHORIZATION_FAILED: OnlyRefused() = %v, Err() = %v; want false, the error kept", w.OnlyRefused(), w.Err())
		}
	})
}

// One warn line per minute at most, naming the partition and offset, and
// saying how many it stands for.
func TestWriterWarnsOncePerMinute(t *testing.T) {
	var buf bytes.Buffer
	clock := &struct{ t time.Time }{time.Unix(1000, 0)}
	w := producer.NewWriter(&fakeClient{}, sinkConfig(), nil, func() time.Time { return clock.t }, producer.Limits{"dlq": 600}, zerolog.New(&buf))
	t.Cleanup(w.Close)
	dead := func(offset int64) {
		w.DeadLetter(&ready.Input{Topic: "calls", KafkaPartition: 2, Offset: offset, Value: bytes.Repeat([]byte("x"), 2000)}, &record.DecodeError{Reason: "bad_json"})
		w.Sync()
	}
	dead(10)
	dead(11)
	clock.t = clock.t.Add(59 * time.Second)
	dead(12)
	clock.t = clock.t.Add(2 * time.Second)
	dead(13)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("4 stubs over 61s logged %d lines, want 2:\n%s", len(lines), buf.String())
	}
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &last); err != nil {
		t.Fatal(err)
	}
	if last["level"] != "warn" || last["partition"] != 2.0 || last["offset"] != 13.0 || last["more_since_last_warning"] != 2.0 || last["topic"] != "dlq" {
		t.Errorf("second warn line = %s, want partition 2, offset 13, topic dlq, 2 more since the last", lines[1])
	}
}

func TestLimitsBatch(t *testing.T) {
	l := producer.Limits{"a": 2048, "tiny": 10, "huge": 1<<31 - 1}
	tests := map[string]int32{"a": 2048, "tiny": 512, "huge": 1 << 30, "unknown": 1_000_012}
	for topic, want := range tests {
		if got := l.Batch(topic); got != want {
			t.Errorf("Limits.Batch(%s) = %d, want %d", topic, got, want)
		}
	}
}
