package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/consumer"
)

// A crash after a commit, mid-stream, and a restart give the results of an
// uninterrupted run: every output the restart repeats is identical to the
// first time, and nothing is missing.
func TestCrashRestartIsExact(t *testing.T) {
	lines := calls(1500, 4, 7)
	kc := newCluster(t, 1)
	brokers := kc.ListenAddrs()
	cfg := parseConfig(t, callsConfig(tumbling), brokers)
	want := replay(t, cfg, onePartition(lines), noWallClock)
	first := replay(t, cfg, onePartition(lines[:1000]), noWallClock)
	second := replay(t, cfg, onePartition(lines[:1200]), noWallClock)

	produce(t, brokers, lines[:1000], func(int) int32 { return 0 })
	s := start(t, cfg, nil)
	waitCount(t, brokers, resultsTopic, int64(len(first.results)))
	cp := waitCheckpoint(t, brokers, cfg.Source.Group, 1000)
	if cp.offset >= 1000 || len(cp.Steps) == 0 {
		t.Fatalf("committed offset %d with %d steps, want open windows behind offset 1000", cp.offset, len(cp.Steps))
	}
	// Outputs after the last commit: the restart repeats them (unless a
	// commit got in first).
	produce(t, brokers, lines[1000:1200], func(int) int32 { return 0 })
	waitCount(t, brokers, resultsTopic, int64(len(second.results)))
	s.crash()

	produce(t, brokers, lines[1200:], func(int) int32 { return 0 })
	s = start(t, cfg, nil)
	waitValue(t, brokers, resultsTopic, want.results[len(want.results)-1])
	s.stop(t)

	got := values(readAll(t, brokers, resultsTopic))
	t.Logf("checkpoint: committed %d, emitted %d, %d steps; %d results, %d after removing repeats", cp.offset, cp.Emitted, len(cp.Steps), len(got), len(dedupe(got)))
	checkRepeats(t, readAll(t, brokers, resultsTopic))
	if got := dedupe(got); !slices.Equal(got, want.results) {
		t.Errorf("results after a restart (repeats removed) differ from an uninterrupted run:\n%s", diff(got, want.results))
	}
	if got := dedupeEvents(events(readAll(t, brokers, lateTopic))); !slices.Equal(got, want.late) {
		t.Errorf("late events after a restart = %d, want %d", len(got), len(want.late))
	}
}

type committed struct {
	offset int64
	consumer.Checkpoint
}

// waitCheckpoint waits for the group's commit on partition 0 to say that
// outputs were emitted up to emitted.
func waitCheckpoint(t testing.TB, brokers []string, group string, emitted int64) committed {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers))
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		os, err := adm.FetchOffsets(context.Background(), group)
		if o, ok := os.Lookup(inTopic, 0); err == nil && ok {
			if cp, err := consumer.ParseCheckpoint(o.Metadata); err == nil && cp.Emitted >= emitted {
				return committed{o.At, cp}
			}
		}
		time.Sleep(20 * time.Millisecond) // polling for an event
	}
	t.Fatalf("no commit with outputs emitted up to %d after %v", emitted, waitTimeout)
	return committed{}
}

// waitValue waits until topic holds a record with value v.
func waitValue(t testing.TB, brokers []string, topic, v string) {
	t.Helper()
	cl := client(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: no record %s after %v", topic, v, waitTimeout)
		}
		for _, r := range fs.Records() {
			if string(r.Value) == v {
				return
			}
		}
	}
}

// checkRepeats fails if one (key, revision) has two different values.
func checkRepeats(t testing.TB, recs []*kgo.Record) {
	t.Helper()
	seen := map[string]string{}
	for _, r := range recs {
		k := string(r.Key) + revision(r.Value)
		if v, ok := seen[k]; ok && v != string(r.Value) {
			t.Errorf("result %s repeated with another value:\n%s\n%s", k, v, r.Value)
		}
		seen[k] = string(r.Value)
	}
}

func revision(v []byte) string {
	var r struct {
		Revision int64  `json:"revision"`
		Firing   string `json:"firing"`
	}
	_ = jsonUnmarshal(v, &r)
	return fmt.Sprintf("/%s/%d", r.Firing, r.Revision)
}

// dedupe drops values seen before, keeping the first occurrence.
func dedupe(vs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range vs {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

func dedupeEvents(es []lateEvent) []lateEvent {
	seen := map[lateEvent]bool{}
	var out []lateEvent
	for _, e := range es {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out
}

// diff shows the first difference of two lists.
func diff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d of %d/%d:\n got %s\nwant %s", i, len(got), len(want), got[i], want[i])
		}
	}
	return fmt.Sprintf("lengths %d, want %d", len(got), len(want))
}
