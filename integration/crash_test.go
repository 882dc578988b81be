package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A crash mid-stream and a restart give the results of an uninterrupted
// run: the restarted service restores its windows from the changelog.
// With exactly_once a read_committed reader sees every result exactly
// once; with at_least_once a repeat is identical to the first time.
func TestCrashRestartIsExact(t *testing.T) {
	t.Parallel() // its own broker
	for _, delivery := range []string{"exactly_once", "at_least_once"} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel() // its own broker
			lines := calls(1500, 4, 7)
			kc := newCluster(t, 1)
			brokers := kc.ListenAddrs()
			cfg := parseConfig(t, callsConfig(tumbling)+"delivery: "+delivery+"\n", brokers)
			want := replay(t, cfg, onePartition(lines), noWallClock)
			first := replay(t, cfg, onePartition(lines[:1000]), noWallClock)

			produce(t, brokers, lines[:1000], func(int) int32 { return 0 })
			s := start(t, cfg, nil)
			waitValue(t, brokers, resultsTopic, first.results[len(first.results)-1])
			produce(t, brokers, lines[1000:1200], func(int) int32 { return 0 })
			s.crash()

			produce(t, brokers, lines[1200:], func(int) int32 { return 0 })
			s = start(t, cfg, nil)
			waitValue(t, brokers, resultsTopic, want.results[len(want.results)-1])
			s.stop(t)

			recs := readAll(t, brokers, resultsTopic)
			got := values(recs)
			checkRepeats(t, recs)
			if delivery == "at_least_once" {
				got = dedupe(got)
			}
			if !slices.Equal(got, want.results) {
				t.Errorf("results after a restart differ from an uninterrupted run:\n%s", diff(got, want.results))
			}
			late := events(readAll(t, brokers, lateTopic))
			if delivery == "at_least_once" {
				late = dedupeEvents(late)
			}
			if !slices.Equal(late, want.late) {
				t.Errorf("late events after a restart = %d, want %d", len(late), len(want.late))
			}
		})
	}
}

// waitValue waits until topic holds a committed record with value v.
func waitValue(t testing.TB, brokers []string, topic, v string) {
	t.Helper()
	waitValueAs(t, brokers, nil, topic, v)
}

// waitValueAs is waitValue by a client with the options as. It reads
// committed records only: a record of an open transaction may be there
// before the records a reader of the topic then sees (readAll stops at
// the last stable offset), and an aborted one never counts.
func waitValueAs(t testing.TB, brokers []string, as []kgo.Opt, topic, v string) {
	t.Helper()
	cl := client(t, brokers, append(slices.Clip(as), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
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
