package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// writeConfig writes a config file for the binary.
func writeConfig(t testing.TB, yaml string, brokers []string) string {
	t.Helper()
	yaml += fmt.Sprintf(`
sink: {results_topic: %s, late_topic: %s, dead_letter_topic: %s, linger: 1ms}
http: {listen: "127.0.0.1:0"}
shutdown_timeout: 10s
`, resultsTopic, lateTopic, dlqTopic)
	yaml = strings.Replace(yaml, "source:\n", fmt.Sprintf("source:\n  brokers: [%q]\n  topics: [%s]\n  group: aggregator-bin\n", brokers[0], inTopic), 1)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startProcess runs `aggregator run --config path`.
func startProcess(t testing.TB, path string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	needBinary(t)
	cmd := exec.Command(binary, "run", "--config", path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &out
}

// sigterm sends SIGTERM and waits for a clean exit within the drain bound.
func sigterm(t testing.TB, cmd *exec.Cmd, out *bytes.Buffer) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after SIGTERM: %v, want exit 0\n%s", err, out)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15s after SIGTERM\n%s", out)
	}
}

// SIGTERM mid-stream exits 0 in time; a restart resumes from the committed
// offsets and no window result is missing.
func TestSigtermAndRestart(t *testing.T) {
	kc := newCluster(t, 1)
	brokers := kc.ListenAddrs()
	path := writeConfig(t, callsConfig(tumbling), brokers)
	cfg := parseConfig(t, callsConfig(tumbling), brokers)
	lines := calls(1500, 4, 3)
	want := replay(t, cfg, onePartition(lines), noWallClock)
	first := replay(t, cfg, onePartition(lines[:800]), noWallClock)

	produce(t, brokers, lines[:800], func(int) int32 { return 0 })
	cmd, out := startProcess(t, path)
	waitCount(t, brokers, resultsTopic, int64(len(first.results)))
	produce(t, brokers, lines[800:1000], func(int) int32 { return 0 })
	sigterm(t, cmd, out)

	produce(t, brokers, lines[1000:], func(int) int32 { return 0 })
	cmd, out = startProcess(t, path)
	waitValue(t, brokers, resultsTopic, want.results[len(want.results)-1])
	sigterm(t, cmd, out)

	recs := readAll(t, brokers, resultsTopic)
	checkRepeats(t, recs)
	if got := dedupe(values(recs)); !slices.Equal(got, want.results) {
		t.Errorf("results across SIGTERM and restart differ from one run:\n%s", diff(got, want.results))
	}
}

// SIGTERM mid-stream and a restart, with each delivery mode: with
// exactly_once (the default) a read_committed reader sees every result
// exactly once; with at_least_once repeats are identical.
func TestSigtermAndRestartByDelivery(t *testing.T) {
	t.Parallel() // its own broker
	for _, delivery := range []string{"", "delivery: at_least_once\n"} {
		name := map[string]string{"": "exactly_once (default)"}[delivery]
		if name == "" {
			name = "at_least_once"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel() // its own broker
			kc := newCluster(t, 4)
			brokers := kc.ListenAddrs()
			path := writeConfig(t, callsConfig(tumbling)+delivery, brokers)
			cfg := parseConfig(t, callsConfig(tumbling)+delivery, brokers)
			lines, parts := ordered(1500, base)
			part := func(i int) int32 { return parts[i] }
			want := replay(t, cfg, byPartition(lines, parts), noWallClock)

			produce(t, brokers, lines[:700], part)
			cmd, out := startProcess(t, path)
			waitCount(t, brokers, resultsTopic, 10)
			produce(t, brokers, lines[700:1000], part)
			sigterm(t, cmd, out)

			produce(t, brokers, lines[1000:], part)
			cmd, out = startProcess(t, path)
			waitValue(t, brokers, resultsTopic, want.results[len(want.results)-1])
			sigterm(t, cmd, out)

			recs := readAll(t, brokers, resultsTopic)
			checkRepeats(t, recs)
			got := values(recs)
			if delivery != "" {
				got = dedupe(got)
			}
			if !slices.Equal(contents(got), contents(want.results)) {
				t.Errorf("results across SIGTERM and restart differ from one run:\n%s", diff(contents(got), contents(want.results)))
			}
		})
	}
}

// kcat, an independent client, reads the results and late topics of a
// running instance.
func TestKcatReadsOutputs(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat not found: install it with `apt-get install -y kcat`")
	}
	lines := readLines(t, "../cmd/aggregator/testdata/000_calls.csv")
	kc := newCluster(t, 1)
	brokers := kc.ListenAddrs()
	cfg := readConfig(t, "../cmd/aggregator/testdata/lateness_0s.yaml", brokers)
	want := replay(t, cfg, onePartition(lines), noWallClock)
	produce(t, brokers, lines, func(int) int32 { return 0 })
	s := start(t, cfg, nil)
	waitCount(t, brokers, resultsTopic, int64(len(want.results)))
	waitCount(t, brokers, lateTopic, int64(len(want.late)))

	type message struct {
		Payload string   `json:"payload"`
		Headers []string `json:"headers"`
	}
	read := func(topic string) []message {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, kcat, "-b", brokers[0], "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q").Output()
		if err != nil {
			t.Fatalf("kcat %s: %v", topic, err)
		}
		var ms []message
		for _, l := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
			var m message
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("kcat line %q: %v", l, err)
			}
			ms = append(ms, m)
		}
		return ms
	}
	var results []string
	for _, m := range read(resultsTopic) {
		results = append(results, m.Payload)
	}
	if !slices.Equal(results, want.results) {
		t.Errorf("kcat reads results %q, want %q", results, want.results)
	}
	var late []lateEvent
	for _, m := range read(lateTopic) {
		var hs []kgo.RecordHeader
		for i := 0; i+1 < len(m.Headers); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: m.Headers[i], Value: []byte(m.Headers[i+1])})
		}
		late = append(late, lateEvent{m.Payload, headerString(hs)})
	}
	if !slices.Equal(late, want.late) {
		t.Errorf("kcat reads late events %q, want %q", late, want.late)
	}
	s.stop(t)
}
