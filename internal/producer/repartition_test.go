package producer_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/metrics"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/repartition"
	"aggregator/internal/watermark"
)

// TestRepartitionPartition: a group key lands in the partition Java's
// DefaultPartitioner (and so Kafka Streams) picks for that record key:
// toPositive(murmur2(key)) % n, with the murmur2 values of Kafka's own
// UtilsTest.testMurmur2.
func TestRepartitionPartition(t *testing.T) {
	javaMurmur2 := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	keys := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for key, h := range javaMurmur2 {
		for _, n := range []int32{1, 3, 4, 7, 64, 1000} {
			want := int32(uint32(h)&0x7fffffff) % n
			if got := producer.RepartitionPartition(keys, []byte(key), n); got != want {
				t.Errorf("RepartitionPartition(%q, %d) = %d, want %d (Java's DefaultPartitioner)", key, n, got, want)
			}
		}
	}
}

// TestWriterRepartition: a repartition record goes to its group key's
// partition with the input's value and timestamp and a header that reads
// back as the input; a marker goes to every partition.
func TestWriterRepartition(t *testing.T) {
	cl := &fakeClient{}
	cfg := sinkConfig()
	cfg.Source.Partitioning, cfg.State.RepartitionTopic = "repartition", "g-repartition"
	m := metrics.New(prometheus.NewRegistry())
	w := newWriter(t, cl, cfg, m, time.Now)
	w.SetRepartitionPartitions(3)
	in := ready.Input{Topic: "calls", Partition: 5, KafkaPartition: 1, Offset: 42, Key: []byte("req-9"), Value: []byte(`{"sid":"a"}`), Timestamp: 1234}
	form := []byte{1, 2, 3}
	w.Write([]ready.Output{
		{Kind: ready.Repartition, Repart: &ready.Repart{In: in, Key: `{"sid":"a"}`, Record: form}},
		{Kind: ready.Marker, Repart: &ready.Repart{Mark: watermark.Mark{Source: 5, Count: 8, Watermark: 99, Idle: true}}},
	})
	w.Sync()
	if len(cl.recs) != 4 {
		t.Fatalf("produced %d records, want 1 data record and 3 markers", len(cl.recs))
	}
	data := cl.recs[0]
	wantPart := producer.RepartitionPartition(kgo.StickyKeyPartitioner(nil).ForTopic("g-repartition"), []byte(`{"sid":"a"}`), 3)
	if data.Topic != "g-repartition" || string(data.Key) != `{"sid":"a"}` || string(data.Value) != string(in.Value) ||
		data.Partition != wantPart || data.Timestamp.UnixMilli() != 1234 || len(data.Headers) != 2 ||
		data.Headers[1].Key != repartition.RecordHeader || string(data.Headers[1].Value) != string(form) {
		t.Fatalf("data record = %s[%d] key %s value %s ts %v headers %v", data.Topic, data.Partition, data.Key, data.Value, data.Timestamp, data.Headers)
	}
	var got ready.Input
	if _, marker, err := repartition.Parse(data.Headers[0].Value, data.Value, 2, 7, nil, &got); err != nil || marker ||
		got.SourceID != 5 || got.KafkaPartition != 1 || got.Offset != 42 || string(got.Key) != "req-9" || got.Timestamp != 1234 || got.Topic != "calls" {
		t.Errorf("data header reads back as %+v, %v, %v", got, marker, err)
	}
	for p, rec := range cl.recs[1:] {
		m, marker, err := repartition.Parse(rec.Headers[0].Value, rec.Value, 0, 0, nil, &got)
		if rec.Partition != int32(p) || err != nil || !marker || m != (watermark.Mark{Source: 5, Count: 8, Watermark: 99, Idle: true}) {
			t.Errorf("marker record %d = partition %d, %+v, %v, %v", p, rec.Partition, m, marker, err)
		}
	}
	if got := value(m.Produced.WithLabelValues("g-repartition")); got != 4 {
		t.Errorf("produced{g-repartition} = %v, want 4", got)
	}
	if value(m.RepartitionBytes) == 0 {
		t.Errorf("repartition_bytes_total stayed 0")
	}
}

// TestWriterRepartitionChunks: records, keys and headers cut from chunks
// stay each their own across chunk boundaries, long keys included.
func TestWriterRepartitionChunks(t *testing.T) {
	cl := &fakeClient{}
	cfg := sinkConfig()
	cfg.Source.Partitioning, cfg.State.RepartitionTopic = "repartition", "g-repartition"
	w := newWriter(t, cl, cfg, nil, time.Now)
	w.SetRepartitionPartitions(4)
	const n = 700
	for i := range n {
		key := fmt.Sprintf(`{"sid":"%s"}`, strings.Repeat("x", i*37%5000))
		in := ready.Input{Topic: "calls", Partition: int32(i % 3), Offset: int64(i), Key: []byte(fmt.Sprint("req-", i)), Value: []byte(fmt.Sprint(i))}
		w.Write([]ready.Output{{Kind: ready.Repartition, Repart: &ready.Repart{In: in, Key: key}}})
	}
	w.Sync()
	if len(cl.recs) != n {
		t.Fatalf("produced %d records, want %d", len(cl.recs), n)
	}
	for i, rec := range cl.recs {
		var got ready.Input
		_, _, err := repartition.Parse(rec.Headers[0].Value, rec.Value, 0, 0, nil, &got)
		if want := fmt.Sprintf(`{"sid":"%s"}`, strings.Repeat("x", i*37%5000)); string(rec.Key) != want || err != nil ||
			got.Offset != int64(i) || string(got.Key) != fmt.Sprint("req-", i) || got.SourceID != int32(i%3) || string(rec.Value) != fmt.Sprint(i) {
			t.Fatalf("record %d: key of %d bytes, header %+v, %v", i, len(rec.Key), got, err)
		}
	}
}

// TestWriterRepartitionAllocs: a repartition record costs the writer no
// allocation of its own: records, headers and bytes come from chunks
// (a chunk is 256 records, so at most a few per thousand).
func TestWriterRepartitionAllocs(t *testing.T) {
	cfg := sinkConfig()
	cfg.Source.Partitioning, cfg.State.RepartitionTopic = "repartition", "g-repartition"
	w := newWriter(t, discard{}, cfg, nil, time.Now)
	w.SetRepartitionPartitions(8)
	in := ready.Input{Topic: "calls", Partition: 5, KafkaPartition: 1, Offset: 42, Key: []byte("req-9"), Value: []byte(`{"sid":"a"}`), Timestamp: 1234}
	outs := []ready.Output{{Kind: ready.Repartition, Repart: &ready.Repart{In: in, Key: `{"sid":"a"}`, Record: []byte{1, 2, 3}}}}
	w.Write(outs)
	allocs := testing.AllocsPerRun(1000, func() { w.Write(outs) })
	if allocs > 0.05 {
		t.Errorf("Write(a repartition record): %v allocations per record, want at most 0.05", allocs)
	}
	w.Sync()
}
