package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// demoResult is the part of a results-topic value the demo test checks.
type demoResult struct {
	Key         map[string]string  `json:"key"`
	WindowStart int64              `json:"window_start"`
	WindowEnd   int64              `json:"window_end"`
	Count       int64              `json:"count"`
	Aggregates  map[string]float64 `json:"aggregates"`
	Firing      string             `json:"firing"`
}

// TestDemoAgainstBrokers runs `aggregator demo --brokers` against a kfake
// cluster the test owns, so the topics outlive the process: the demo must
// create them, feed the pipeline, and leave results, late events and dead
// letters behind, with keys partitioned by the producer.
func TestDemoAgainstBrokers(t *testing.T) {
	t.Parallel() // its own broker; the demo mostly waits on the wall clock
	brokers, stdout := runDemo(t)
	if !regexp.MustCompile(`(?m)^demo: elapsed=\S+ produced=\d+ .* results=[1-9]`).MatchString(stdout.String()) {
		t.Errorf("stdout (not a terminal) has no summary line with results:\n%s", stdout.String())
	}

	checkDemoResults(t, readAll(t, brokers, "calls-windows"))
	checkHeaders(t, readAll(t, brokers, "calls-late"), "aggregator.window_end")
	checkHeaders(t, readAll(t, brokers, "calls-dlq"), "aggregator.reason")
	checkKeyedByPartition(t, readAll(t, brokers, "calls"))
	checkCompacted(t, brokers, "calls-windows")
}

// runDemo runs `aggregator demo --brokers` with extra flags against a kfake
// cluster the test owns, so the topics outlive the process, and returns
// the brokers and the demo's stdout. It stops the demo with SIGINT (as
// Ctrl-C) once a summary line shows results, late events and dead
// letters, or fails after 2 minutes: a loaded machine makes the run
// longer, not emptier. At 4x event time a 5s window takes 1.25s.
func runDemo(t *testing.T, extra ...string) ([]string, *bytes.Buffer) {
	t.Helper()
	needBinary(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(kc.Close)
	brokers := kc.ListenAddrs()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	args := append([]string{"demo", "--brokers", strings.Join(brokers, ","),
		"--speed", "4", "--rate", "200", "--late-fraction", "0.05", "--partitions", "2", "--listen", "127.0.0.1:0"}, extra...)
	cmd := exec.CommandContext(ctx, binary, args...)
	var stdout, stderr bytes.Buffer
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	enough := regexp.MustCompile(`results=[1-9].* late=[1-9]\d* dead_letters=[1-9]`)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		stdout.WriteString(sc.Text() + "\n")
		if enough.MatchString(sc.Text()) {
			break
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatalf("aggregator %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	rest, _ := io.ReadAll(out) // the drain's last frame
	stdout.Write(rest)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("aggregator %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	return brokers, &stdout
}

// TestDemoGoRunCtrlC: the README's first command, `go run
// ./cmd/aggregator demo`, on a terminal, stopped with Ctrl-C once its view
// is drawn, ends with exit status 0, its last frame drawn. The terminal
// sends SIGINT to its whole foreground group, the go command too, which
// exits 1 on it whatever its program does: the demo reads the key itself
// instead (cmd/aggregator's watchCtrlC).
func TestDemoGoRunCtrlC(t *testing.T) {
	t.Parallel()  // mostly waits on the wall clock
	needBinary(t) // the build of the same packages: go run only links
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "../cmd/aggregator", "demo", "--listen", "127.0.0.1:0", "--speed", "4", "--rate", "100")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 120, Rows: 40}) // its own session: the terminal's foreground group is go's
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var out durBuffer // one goroutine writes it while this one reads
	read := make(chan error, 1)
	frame := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		drawn := false
		for {
			n, err := ptmx.Read(buf)
			out.Write(buf[:n])
			if !drawn && strings.Contains(out.String(), "latest result per key") {
				drawn = true
				close(frame)
			}
			if err != nil { // EIO once every process of the terminal is gone
				read <- err
				return
			}
		}
	}()
	select {
	case <-frame:
	case <-ctx.Done():
		t.Fatalf("no frame with results after 2 minutes; output:\n%s", out.String())
	}
	if _, err := ptmx.Write([]byte{0x03}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	err = cmd.Wait()
	<-read
	if err != nil || !strings.Contains(out.String(), "stopped.") {
		t.Errorf("go run ./cmd/aggregator demo, Ctrl-C: %v, want exit status 0 after the last frame; its output ends:\n%s", err, tail(out.String(), 2000))
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string { return s[max(len(s)-n, 0):] }

func checkDemoResults(t *testing.T, recs []*kgo.Record) {
	t.Helper()
	if len(recs) == 0 {
		t.Fatal("calls-windows is empty, want window results")
	}
	names := []string{"avg_duration", "calls", "p99_duration", "total_duration"}
	for _, rec := range recs {
		var r demoResult
		if err := json.Unmarshal(rec.Value, &r); err != nil {
			t.Fatalf("result %s: %v", rec.Value, err)
		}
		got := []string{}
		for name := range r.Aggregates {
			got = append(got, name)
		}
		slices.Sort(got)
		switch {
		case !strings.HasPrefix(r.Key["sid"], "sid_"), r.WindowEnd-r.WindowStart != 5000, r.WindowStart%5000 != 0,
			r.Count < 1, r.Aggregates["calls"] != float64(r.Count), !slices.Equal(got, names),
			r.Firing != "on_time" && r.Firing != "late":
			t.Errorf("result %s: want a sid key, an aligned 5s window, calls = count and aggregates %v", rec.Value, names)
		}
	}
}

func checkHeaders(t *testing.T, recs []*kgo.Record, header string) {
	t.Helper()
	if len(recs) == 0 {
		t.Fatalf("want records with header %s, topic is empty", header)
	}
	for _, rec := range recs {
		if !slices.ContainsFunc(rec.Headers, func(h kgo.RecordHeader) bool { return h.Key == header }) {
			t.Errorf("%s record %s has no %s header: %v", rec.Topic, rec.Value, header, rec.Headers)
		}
	}
}

// checkKeyedByPartition checks the generator let the producer partition by
// key: every sid in exactly one partition, the assumption of docs/delivery.md#partitions.
func checkKeyedByPartition(t *testing.T, recs []*kgo.Record) {
	t.Helper()
	partitionOf := map[string]int32{}
	used := map[int32]bool{}
	for _, rec := range recs {
		key := string(rec.Key)
		if p, ok := partitionOf[key]; ok && p != rec.Partition {
			t.Fatalf("key %s is in partitions %d and %d", key, p, rec.Partition)
		}
		partitionOf[key] = rec.Partition
		used[rec.Partition] = true
	}
	if len(partitionOf) != 8 || len(used) != 2 {
		t.Errorf("calls: %d keys over %d partitions, want 8 keys (--keys default) over 2", len(partitionOf), len(used))
	}
}

func checkCompacted(t *testing.T, brokers []string, topic string) {
	t.Helper()
	configs, err := kadm.NewClient(client(t, brokers)).DescribeTopicConfigs(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := configs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.MaybeValue() == "compact" {
			return
		}
	}
	t.Errorf("%s configs %v: want cleanup.policy=compact", topic, rc.Configs)
}

// TestDemoSessions: `aggregator demo --window session` runs the session
// engine end to end: it exits 0 (retraction tombstones on the results
// topic are read, not errors) and leaves session results whose windows are
// at least the 500ms gap long and not aligned to fixed windows.
func TestDemoSessions(t *testing.T) {
	t.Parallel() // its own broker; the demo mostly waits on the wall clock
	brokers, _ := runDemo(t, "--window", "session")
	results, unaligned := 0, 0
	for _, rec := range readAll(t, brokers, "calls-windows") {
		if rec.Value == nil {
			continue // a retraction
		}
		var r demoResult
		if err := json.Unmarshal(rec.Value, &r); err != nil {
			t.Fatalf("result %s: %v", rec.Value, err)
		}
		results++
		if r.WindowEnd-r.WindowStart < 500 || r.Count < 1 || r.Aggregates["calls"] != float64(r.Count) {
			t.Errorf("result %s: want a session of at least the 500ms gap, calls = count", rec.Value)
		}
		if r.WindowStart%1000 != 0 {
			unaligned++
		}
	}
	if results == 0 || unaligned == 0 {
		t.Errorf("%d session results, %d not on whole seconds: want results, at record times", results, unaligned)
	}
}
