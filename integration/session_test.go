package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

const sessionYAML = `
source:
  key: [sid]
  partitioning: by_key
  timestamp: {field: t, layout: unix_ms}
watermark: {max_out_of_orderness: 200ms}
window: {type: session, gap: 1s, gap_field: g, allowed_lateness: 2s}
aggregates:
  - {name: calls, fn: count}
  - {name: total, fn: sum, field: d}
  - {name: p90, fn: quantile, field: d, q: 0.9}
`

// sessionLines is a stream for session windows: 6 keys, times mostly in
// order, records up to 3s old (they extend or bridge sessions that fired:
// retractions), some far too old (late events), some with their own gap,
// and a bad gap now and then (dead letters).
func sessionLines(seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, 3))
	t := int64(base)
	var out []string
	for range n {
		t += rng.Int64N(250)
		ts, extra := t, ""
		switch r := rng.IntN(100); {
		case r < 12:
			ts -= rng.Int64N(3000)
		case r < 15:
			ts -= 5000 + rng.Int64N(5000)
		case r < 20:
			extra = fmt.Sprintf(`,"g":"%dms"`, 1+rng.Int64N(3000))
		case r < 21:
			extra = `,"g":-1`
		}
		out = append(out, fmt.Sprintf(`{"sid":"s%d","t":%d,"d":%d%s}`, rng.IntN(6), ts, rng.IntN(500), extra))
	}
	return out
}

// TestSessionsRunEqualsReplay: `aggregator run` on kfake writes to the
// results topic exactly what `aggregator replay --kcat` prints for a kcat
// dump of the input topic: the same results in the same order, and each
// retraction as a tombstone (null value) under the superseded session's
// key, where replay prints a retract line. One partition, so the order is
// the record order in both.
func TestSessionsRunEqualsReplay(t *testing.T) {
	t.Parallel() // its own broker
	needBinary(t)
	kc := newCluster(t, 1)
	brokers := kc.ListenAddrs()
	lines := sessionLines(21, 1500)
	produce(t, brokers, lines, func(int) int32 { return 0 })

	var dump bytes.Buffer
	for _, r := range readAll(t, brokers, inTopic) {
		l, err := json.Marshal(map[string]any{"topic": r.Topic, "partition": r.Partition, "offset": r.Offset,
			"ts": r.Timestamp.UnixMilli(), "key": string(r.Key), "payload": string(r.Value)})
		if err != nil {
			t.Fatal(err)
		}
		dump.Write(append(l, '\n'))
	}
	cmd := exec.Command(binary, "replay", "--config", writeConfig(t, sessionYAML, brokers), "--kcat", "--no-flush")
	cmd.Stdin = &dump
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("replay --kcat: %v", err)
	}
	var want []string
	retracts := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case strings.HasPrefix(l, `{"type":"result",`):
			want = append(want, "result {"+l[len(`{"type":"result",`):])
		case strings.HasPrefix(l, `{"type":"retract",`):
			want = append(want, "retract {"+l[len(`{"type":"retract",`):])
			retracts++
		}
	}
	if len(want) == 0 || retracts == 0 {
		t.Fatalf("replay gave %d results and retractions, %d retractions: want some of each", len(want), retracts)
	}

	s := start(t, parseConfig(t, sessionYAML, brokers), nil)
	waitCount(t, brokers, resultsTopic, int64(len(want)))
	s.stop(t)
	var got []string
	for _, r := range readAll(t, brokers, resultsTopic) {
		got = append(got, resultRecord(r))
	}
	if !slices.Equal(got, want) {
		t.Errorf("results topic differs from replay --kcat:\n%s", diff(got, want))
	}
}

// resultRecord is a results-topic record as replay prints it: a result's
// value, or a tombstone's key (the retracted session's key and window).
func resultRecord(r *kgo.Record) string {
	if r.Value == nil {
		return "retract " + string(r.Key)
	}
	return "result " + string(r.Value)
}
