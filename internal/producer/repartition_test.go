package producer_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"aggregator/internal/metrics"
	"aggregator/internal/ready"
	"aggregator/internal/repartition"
	"aggregator/internal/watermark"
)

// TestWriterRepartition: a repartition record goes to the partition
// stage 1 picked, under its group key, with the input's timestamp; in formats 2 and 3 (0 in a
// Config built in code is 2) without headers, its value reading back as
// the input, its value and the compact form; in format 1 with the input's value and a header that
// reads back as the input. A marker goes to every partition.
func TestWriterRepartition(t *testing.T) {
	for _, format := range []int32{0, repartition.Format3, repartition.Format2, repartition.Format1} {
		t.Run(fmt.Sprint("format ", format), func(t *testing.T) {
			cl := &fakeClient{}
			cfg := sinkConfig()
			cfg.Source.Partitioning, cfg.State.RepartitionTopic, cfg.State.RepartitionFormat = "repartition", "g-repartition", format
			m := metrics.New(prometheus.NewRegistry())
			w := newWriter(t, cl, cfg, m, time.Now)
			w.SetRepartitionPartitions(3)
			in := ready.Input{Topic: "calls", Partition: 5, KafkaPartition: 1, Offset: 42, Key: []byte("req-9"), Value: []byte(`{"sid":"a"}`), Timestamp: 1234}
			form := []byte{1, 2, 3}
			w.Write([]ready.Output{
				{Kind: ready.Repartition, Repart: encoded(ready.Repart{In: in, Key: `{"sid":"a"}`, Partition: 2, Record: form}, cfg.State.RepartitionFormat)},
				{Kind: ready.Marker, Repart: repartition.MarkerRepart(watermark.Mark{Source: 5, Count: 8, Watermark: 99, Idle: true})},
			})
			w.Sync()
			if len(cl.recs) != 4 {
				t.Fatalf("produced %d records, want 1 data record and 3 markers", len(cl.recs))
			}
			data := cl.recs[0]
			if data.Topic != "g-repartition" || string(data.Key) != `{"sid":"a"}` || data.Partition != 2 || data.Timestamp.UnixMilli() != 1234 {
				t.Fatalf("data record = %s[%d] key %s ts %v", data.Topic, data.Partition, data.Key, data.Timestamp)
			}
			var got ready.Input
			var gotForm []byte
			var err error
			if format == repartition.Format1 {
				if len(data.Headers) != 1 || string(data.Value) != string(in.Value) {
					t.Fatalf("format 1 data record: value %s, headers %v, want the input value and one header", data.Value, data.Headers)
				}
				var marker bool
				_, marker, err = repartition.Parse(data.Headers[0].Value, data.Value, 2, 7, nil, &got)
				gotForm = form // not written
				if marker {
					t.Errorf("the data record reads as a marker")
				}
			} else {
				if len(data.Headers) != 0 {
					t.Fatalf("format 2 data record: headers %v, want none", data.Headers)
				}
				gotForm, _, err = repartition.ParseValue(data.Value, 2, 7, nil, &got)
			}
			if err != nil || got.SourceID != 5 || got.KafkaPartition != 1 || got.Offset != 42 || string(got.Key) != "req-9" ||
				got.Timestamp != 1234 || got.Topic != "calls" || string(got.Value) != string(in.Value) || string(gotForm) != string(form) {
				t.Errorf("data record reads back as %+v, form %v, %v", got, gotForm, err)
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
		})
	}
}

// TestWriterRepartitionChunks: records, keys and headers cut from chunks
// stay each their own across chunk boundaries, long keys included.
func TestWriterRepartitionChunks(t *testing.T) {
	for _, format := range []int32{repartition.Format3, repartition.Format2, repartition.Format1} {
		t.Run(fmt.Sprint("format ", format), func(t *testing.T) {
			cl := &fakeClient{}
			cfg := sinkConfig()
			cfg.Source.Partitioning, cfg.State.RepartitionTopic, cfg.State.RepartitionFormat = "repartition", "g-repartition", format
			w := newWriter(t, cl, cfg, nil, time.Now)
			w.SetRepartitionPartitions(4)
			const n = 700
			value := func(i int) string { return fmt.Sprint(i, strings.Repeat("v", i*53%3000)) }
			for i := range n {
				key := fmt.Sprintf(`{"sid":"%s"}`, strings.Repeat("x", i*37%5000))
				in := ready.Input{Topic: "calls", Partition: int32(i % 3), Offset: int64(i), Key: []byte(fmt.Sprint("req-", i)), Value: []byte(value(i))}
				w.Write([]ready.Output{{Kind: ready.Repartition, Repart: encoded(ready.Repart{In: in, Key: key, Record: []byte(fmt.Sprint("form-", i))}, format)}})
			}
			w.Sync()
			if len(cl.recs) != n {
				t.Fatalf("produced %d records, want %d", len(cl.recs), n)
			}
			for i, rec := range cl.recs {
				var got ready.Input
				var err error
				form := []byte(fmt.Sprint("form-", i))
				if format == repartition.Format1 {
					_, _, err = repartition.Parse(rec.Headers[0].Value, rec.Value, 0, 0, nil, &got)
				} else {
					form, _, err = repartition.ParseValue(rec.Value, 0, 0, nil, &got)
				}
				if want := fmt.Sprintf(`{"sid":"%s"}`, strings.Repeat("x", i*37%5000)); string(rec.Key) != want || err != nil ||
					got.Offset != int64(i) || string(got.Key) != fmt.Sprint("req-", i) || got.SourceID != int32(i%3) ||
					string(got.Value) != value(i) || string(form) != fmt.Sprint("form-", i) {
					t.Fatalf("record %d: key of %d bytes, read back as %+v, form %q, %v", i, len(rec.Key), got, form, err)
				}
			}
		})
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
	outs := []ready.Output{{Kind: ready.Repartition, Repart: encoded(ready.Repart{In: in, Key: `{"sid":"a"}`, Record: []byte{1, 2, 3}}, repartition.Format2)}}
	w.Write(outs)
	allocs := testing.AllocsPerRun(1000, func() { w.Write(outs) })
	if allocs > 0.05 {
		t.Errorf("Write(a repartition record): %v allocations per record, want at most 0.05", allocs)
	}
	w.Sync()
}

// encoded is r as stage 1 hands it to the writer: encoded in format (0
// is format 2).
func encoded(r ready.Repart, format int32) *ready.Repart {
	repartition.AppendRepart(nil, &r, format)
	return &r
}

// TestWriterRepartitionGroup: a group of partials goes to the partition
// stage 1 picked, without a key, as stage 1 encoded it; the records are
// counted by kind and the folded input records with them.
func TestWriterRepartitionGroup(t *testing.T) {
	cl := &fakeClient{}
	cfg := sinkConfig()
	cfg.Source.Partitioning, cfg.State.RepartitionTopic = "repartition", "g-repartition"
	m := metrics.New(prometheus.NewRegistry())
	w := newWriter(t, cl, cfg, m, time.Now)
	w.SetRepartitionPartitions(3)
	in := ready.Input{Topic: "calls", Partition: 5, KafkaPartition: 1, Offset: 42, Timestamp: 1234}
	w.Write([]ready.Output{
		{Kind: ready.Repartition, Repart: &ready.Repart{In: in, Partition: 1, Folded: 7, Encoded: []byte("group")}},
		{Kind: ready.Repartition, Repart: encoded(ready.Repart{In: in, Key: `{"sid":"a"}`, Partition: 2, Record: []byte{1}}, repartition.Format4)},
	})
	w.Sync()
	if len(cl.recs) != 2 {
		t.Fatalf("produced %d records, want 2", len(cl.recs))
	}
	if g := cl.recs[0]; g.Partition != 1 || g.Key != nil || string(g.Value) != "group" || len(g.Headers) != 0 || g.Timestamp.UnixMilli() != 1234 {
		t.Errorf("group record = partition %d, key %q, value %q, headers %v, ts %v; want partition 1, no key, the encoded group", g.Partition, g.Key, g.Value, g.Headers, g.Timestamp)
	}
	if r := cl.recs[1]; r.Partition != 2 || string(r.Key) != `{"sid":"a"}` {
		t.Errorf("data record = partition %d, key %q; want 2, its group key", r.Partition, r.Key)
	}
	if rec, part, folded := value(m.RepartitionRecords.WithLabelValues("record")), value(m.RepartitionRecords.WithLabelValues("partial")), value(m.RepartitionFolded); rec != 1 || part != 1 || folded != 7 {
		t.Errorf("repartition_records_total record %v, partial %v, folded_records_total %v; want 1, 1, 7", rec, part, folded)
	}
}
