package producer_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// A Ready's outputs go to their topics in emission order, the late event
// and dead letter with the Kafka partition they were read from (not the
// state id) in their source header.
func TestWriterWritesReadyOutputs(t *testing.T) {
	cl := &fakeClient{}
	w := newWriter(t, cl, sinkConfig(), nil, time.Now)
	in := ready.Input{Topic: "calls", Partition: 7, KafkaPartition: 3, Offset: 9, Value: []byte("v")}
	w.Write([]ready.Output{
		{Kind: ready.Late, Event: &ready.Event{In: in, EventTime: 10, Watermark: 20, Missed: windowing.Window{Start: 0, End: 5}}},
		{Kind: ready.Result, Result: windowing.Result{Key: `{"sid":"a"}`, Window: windowing.Window{End: 5000}, Count: 1,
			Aggregates: []record.Value{record.Number(1)}}},
		{Kind: ready.DeadLetter, Event: &ready.Event{In: in, Err: &record.DecodeError{Reason: "bad_json"}}},
	})
	w.Sync()
	var topics []string
	for _, r := range cl.recs {
		topics = append(topics, r.Topic)
		for _, h := range r.Headers {
			if h.Key == producer.HeaderSourcePartition && string(h.Value) != "3" {
				t.Errorf("%s: source partition header %s, want 3", r.Topic, h.Value)
			}
		}
	}
	if want := []string{"late", "res", "dlq"}; !slices.Equal(topics, want) {
		t.Errorf("topics %v, want %v", topics, want)
	}
}

// Changelog records go to the changelog partition they name; a tombstone
// carries its commit tag in the tag header; a failed one is the Writer's
// failure.
func TestWriterWritesChangelog(t *testing.T) {
	cfg := sinkConfig()
	cfg.State.ChangelogTopic = "g-changelog"
	cl := &fakeClient{}
	w := newWriter(t, cl, cfg, nil, time.Now)
	w.Changelog(t.Context(), []ready.Changelog{
		{Partition: 2, Key: []byte("k1"), Value: []byte("v1"), Tag: 4},
		{Partition: 5, Key: []byte("k2"), Tag: 4},
	})
	if len(cl.recs) != 2 {
		t.Fatalf("%d records, want 2", len(cl.recs))
	}
	for i, want := range []struct {
		part     int32
		key, tag string
	}{{2, "k1", ""}, {5, "k2", string(state.AppendTag(nil, 4))}} {
		r := cl.recs[i]
		var tag string
		for _, h := range r.Headers {
			if h.Key == state.TagHeader {
				tag = string(h.Value)
			}
		}
		if r.Topic != "g-changelog" || r.Partition != want.part || !bytes.Equal(r.Key, []byte(want.key)) || tag != want.tag {
			t.Errorf("record %d: %s[%d] key %q tag %q, want g-changelog[%d] key %q tag %q", i, r.Topic, r.Partition, r.Key, tag, want.part, want.key, want.tag)
		}
	}
	if err := w.Err(); err != nil {
		t.Fatalf("Err = %v after written records", err)
	}

	failing := &fakeClient{err: errors.New("broker says no")}
	w = newWriter(t, failing, cfg, nil, time.Now)
	w.Changelog(t.Context(), []ready.Changelog{{Partition: 1, Key: []byte("k"), Value: []byte("v")}})
	if err := w.Err(); err == nil || !strings.Contains(err.Error(), "changelog g-changelog[1]") || w.OnlyRefused() {
		t.Errorf("Err = %v (only refused %v), want the changelog failure, not a refused output", err, w.OnlyRefused())
	}
}
