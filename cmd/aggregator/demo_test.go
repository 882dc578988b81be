package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
)

func TestDemoConfigIsValid(t *testing.T) {
	f, err := parseDemoFlags(nil, new(bytes.Buffer))
	if err != nil {
		t.Fatalf("parseDemoFlags(none) = %v", err)
	}
	cfg, err := demoConfig(f, []string{"127.0.0.1:9092"}, 1, "")
	if err != nil {
		t.Fatalf("demoConfig() = %v", err)
	}
	if err := cfg.ValidateKafka(); err != nil {
		t.Errorf("demoConfig().ValidateKafka() = %v", err)
	}
	got := fmt.Sprintf("%s %v %v %v %d %s", cfg.Delivery, cfg.Window.Size, cfg.Watermark.MaxOutOfOrderness,
		cfg.Window.AllowedLateness, len(cfg.Aggregates), cfg.HTTP.Listen)
	if want := "exactly_once 5s 1s 2s 4 :9090"; got != want {
		t.Errorf("demoConfig() = %s, want %s", got, want)
	}
}

// TestDemoWindowConfigs: every --window, with and without --early, makes
// a valid config with the window it says.
func TestDemoWindowConfigs(t *testing.T) {
	tests := map[string]struct {
		args  []string
		typ   string
		early time.Duration
	}{
		"tumbling":         {nil, "tumbling", 0},
		"tumbling, early":  {[]string{"--early", "500ms"}, "tumbling", 500 * time.Millisecond},
		"sliding":          {[]string{"--window", "sliding"}, "sliding", 0},
		"session, early":   {[]string{"--window", "session", "--early", "2s"}, "session", 2 * time.Second},
		"global":           {[]string{"--window", "global"}, "global", time.Second},
		"global, early 3s": {[]string{"--window", "global", "--early", "3s"}, "global", 3 * time.Second},
		"count":            {[]string{"--window", "count"}, "count", 0},
		"calendar":         {[]string{"--window", "calendar"}, "tumbling", time.Second},
		"repartition":      {[]string{"--partitioning", "repartition"}, "tumbling", 0},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			f, err := parseDemoFlags(tt.args, new(bytes.Buffer))
			if err != nil {
				t.Fatalf("parseDemoFlags(%q) = %v", tt.args, err)
			}
			cfg, err := demoConfig(f, []string{"127.0.0.1:9092"}, 1, "")
			if err != nil {
				t.Fatalf("demoConfig(%q) = %v", tt.args, err)
			}
			if cfg.Window.Type != tt.typ || cfg.Window.EarlyFirings.Every != tt.early {
				t.Errorf("demoConfig(%q).Window = %+v, want type %s, early every %v", tt.args, cfg.Window, tt.typ, tt.early)
			}
			if byKey := !slices.Contains(tt.args, "repartition"); cfg.Source.ByKey() != byKey {
				t.Errorf("demoConfig(%q).Source.ByKey() = %v, want %v", tt.args, cfg.Source.ByKey(), byKey)
			}
			if zone := cfg.Window.Zone(); (name == "calendar") != (zone != nil) || zone != nil && zone.String() != demoZone {
				t.Errorf("demoConfig(%q).Window = %+v: zone %v, want days in %s only with --window calendar", tt.args, cfg.Window, zone, demoZone)
			}
		})
	}
}

func TestParseDemoFlagsErrors(t *testing.T) {
	tests := map[string][]string{
		"negative rate":                  {"--rate", "-1"},
		"no keys":                        {"--keys", "0"},
		"late fraction > 0.5":            {"--late-fraction", "0.9"},
		"zero speed":                     {"--speed", "0"},
		"unknown flag":                   {"--nope"},
		"unknown window":                 {"--window", "hopping"},
		"count, early":                   {"--window", "count", "--early", "1s"},
		"negative early":                 {"--early", "-1s"},
		"early below a ms":               {"--early", "1500us"},
		"argument":                       {"extra"},
		"unknown format":                 {"--format", "protobuf"},
		"no instances":                   {"--instances", "0"},
		"unknown partitioning":           {"--partitioning", "auto"},
		"more instances than partitions": {"--instances", "4"},
		"instances above --partitions":   {"--partitions", "2", "--instances", "3"},
		"negative change-at":             {"--change-at", "-1s"},
		"change-at, sessions":            {"--change-at", "10s", "--window", "session"},
	}
	for name, args := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := parseDemoFlags(args, new(bytes.Buffer)); !errors.Is(err, errUsage) {
				t.Errorf("parseDemoFlags(%q) = %v, want errUsage", args, err)
			}
		})
	}
}

func TestMetricsURL(t *testing.T) {
	tests := map[string]string{
		"[::]:9090":      "http://localhost:9090/metrics",
		"0.0.0.0:9090":   "http://localhost:9090/metrics",
		"127.0.0.1:4000": "http://127.0.0.1:4000/metrics",
		"[::1]:4000":     "http://[::1]:4000/metrics",
	}
	for addr, want := range tests {
		if got := metricsURL(addr); got != want {
			t.Errorf("metricsURL(%q) = %q, want %q", addr, got, want)
		}
	}
}

func TestBusyHint(t *testing.T) {
	busy := fmt.Errorf("http.listen: %w", syscall.EADDRINUSE)
	if got := busyHint(busy, ":9090").Error(); !strings.Contains(got, "another process is listening on :9090") {
		t.Errorf("busyHint(EADDRINUSE) = %q, want it to say the address is taken", got)
	}
	other := errors.New("http.listen: no such host")
	if got := busyHint(other, "nope:1"); got != other {
		t.Errorf("busyHint(other) = %v, want it unchanged", got)
	}
}

// TestDemoRuns runs `aggregator demo` in-process against its own kfake,
// with the event clock at 4x so windows fire within the run, until a
// summary line shows results, late events and dead letters come back from
// the output topics; then it stops the demo as Ctrl-C would.
func TestDemoRuns(t *testing.T) {
	demoUntilOutputs(t, "demo", "--speed", "4", "--rate", "200", "--late-fraction", "0.05", "--listen", "127.0.0.1:0")
}

// TestDemoRunsAvro is TestDemoRuns with --format avro: the generator
// writes Avro through the in-process registry, and malformed values are
// the registry formats' dead letters.
func TestDemoRunsAvro(t *testing.T) {
	demoUntilOutputs(t, "demo", "--format", "avro", "--speed", "4", "--rate", "200", "--late-fraction", "0.05", "--listen", "127.0.0.1:0")
}

// demoUntilOutputs runs the demo with args until its summary shows
// results, late events, dead letters and keys, and checks its last line,
// and that its output (not a terminal) begins with the legend and has a
// line per result.
func demoUntilOutputs(t *testing.T, args ...string) {
	t.Helper()
	seen := func(line string) bool {
		for _, field := range []string{"results", "late", "dead_letters", "keys"} {
			if !regexp.MustCompile(`\b` + field + `=[1-9]`).MatchString(line) {
				return false
			}
		}
		return true
	}
	last, out := runDemoOutput(t, args, seen)
	if !seen(last) {
		t.Errorf("last summary %q: want results, late, dead_letters and keys above 0", last)
	}
	if !strings.HasPrefix(out, "aggregator demo · Kafka: in-process kfake at ") || !strings.Contains(out, "\n  replay_compared: windows whose") {
		t.Errorf("output does not begin with the legend:\n%s", out[:min(len(out), 2000)])
	}
	results := regexp.MustCompile(`(?m)^result key=sid_\d+ window=\[\S+\) count=\d+ calls=\d+ total_duration=\d+ avg_duration=\S+ p99_duration=\d+ firing=(on_time|late) revision=\d+$`)
	if n, want := len(results.FindAllString(out, -1)), summaryField(t, last, "results"); n != want {
		t.Errorf("%d result lines, want one per result (%d):\n%s", n, want, out[:min(len(out), 4000)])
	}
}

// runDemoUntil runs `aggregator` with args in-process until done holds
// for its last summary line (or 2 minutes pass: it fails then), stops it
// as Ctrl-C would, and returns the summary line of its last frame.
func runDemoUntil(t *testing.T, args []string, done func(last string) bool) string {
	t.Helper()
	last, _ := runDemoOutput(t, args, done)
	return last
}

// runDemoOutput is runDemoUntil, which also returns the whole output.
func runDemoOutput(t *testing.T, args []string, done func(last string) bool) (last, out string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr syncBuffer
	ended := make(chan error, 1)
	go func() { ended <- run(ctx, args, nil, nil, &stdout, &stderr) }()
	waited := false
	defer func() { // on a failure too, the demo stops before the test ends
		cancel()
		if !waited {
			<-ended
		}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for last := ""; ; {
		if last = stdout.lastLine(); done(last) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run(%q): after 2 minutes, last summary:\n%s\nstderr:\n%s", args, last, stderr.String())
		}
		select {
		case err := <-ended:
			waited = true
			t.Fatalf("run(%q) ended early: %v; stdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
		case <-tick.C:
		}
	}
	cancel() // as Ctrl-C: the instances drain, the last frame is drawn
	err := <-ended
	waited = true
	if err != nil {
		t.Fatalf("run(%q) = %v; stderr:\n%s", args, err, stderr.String())
	}
	return stdout.lastLine(), stdout.String()
}

func summaryField(t *testing.T, line, name string) int {
	t.Helper()
	m := regexp.MustCompile(`\b` + name + `=(\d+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("summary %q has no %s=", line, name)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestDemoInstances runs `aggregator demo --instances N` in-process: N
// service instances in one group share the input's 3 partitions, and the
// view's check finds their results equal to those of the reference run,
// a replay of the input in one process, window by window. It waits (with
// a deadline) until every instance holds a partition and two windows of
// every key have been compared, then
// stops the demo as Ctrl-C would and reads the last summary line: a
// loaded machine makes the run longer, not the check weaker. Sliding
// windows with 3 instances: a straggler is in 5 windows at once. With
// the repartition stage, every sid is on every partition (calls keyed by
// call id), and two or three instances still give one instance's
// results. Three instances with the repartition stage share 6 partitions
// of two topics, and the group's balancer gives one instance only
// repartition partitions in about one run of three: the demo then waited
// for ever for it to hold an input partition (TestUnsettled checks that
// assignment every time), so that case runs twice. With --format avro,
// stage 1 decodes with the in-process registry's schema on whichever
// instance holds the input partition, and stage 2 on every instance
// reads the compact form.
func TestDemoInstances(t *testing.T) {
	t.Parallel() // mostly waits on the wall clock, beside the package's other tests
	cases := []struct {
		instances    int
		window       string
		partitioning string
		format       string
		run          int
	}{{2, "tumbling", "by_key", "json", 1}, {3, "tumbling", "repartition", "avro", 1}, {3, "tumbling", "repartition", "json", 1},
		{3, "tumbling", "repartition", "json", 2}, {2, "tumbling", "repartition", "json", 1}, {3, "sliding", "by_key", "json", 1}}
	rate := "100"
	if raceEnabled { // the instances run several times slower: half the rate, and no sliding windows' five results per record
		cases, rate = cases[:2], "50"
	}
	for _, tt := range cases {
		t.Run(fmt.Sprintf("%d %s %s %s #%d", tt.instances, tt.window, tt.partitioning, tt.format, tt.run), func(t *testing.T) {
			t.Parallel() // its own broker; mostly waits on the wall clock
			args := []string{"demo", "--instances", strconv.Itoa(tt.instances), "--window", tt.window, "--partitioning", tt.partitioning, "--format", tt.format,
				"--speed", "4", "--rate", rate, "--late-fraction", "0.05", "--listen", "127.0.0.1:0"}
			// Two windows of each of the 8 keys (one under race) compared
			// after the first late events (they start 1 s after the
			// instances hold their partitions, once each has a watermark),
			// every instance holding a partition.
			windows := 16
			if raceEnabled {
				windows = 8
			}
			// Every instance holds a partition, of the input topic or,
			// with the repartition stage, of either topic: nothing is
			// waited for.
			spread := regexp.MustCompile(`\binstances=` + strconv.Itoa(tt.instances) + ` partitions=(\d+:[\d,]+;?)+ `)
			if tt.partitioning == "repartition" {
				spread = regexp.MustCompile(`\binstances=` + strconv.Itoa(tt.instances) + ` partitions=\S+ repartition=\S+ (replay_compared|kafka)=`)
			}
			want := -1 // windows compared to wait for, once late events came
			last := runDemoUntil(t, args, func(last string) bool {
				if !strings.Contains(last, " replay_compared=") {
					return false
				}
				compared := summaryField(t, last, "replay_compared")
				if want < 0 && summaryField(t, last, "late") > 0 {
					want = compared + windows
				}
				// And a dead letter seen: 1% of the records are malformed,
				// and a fast run compares its windows within 300 records.
				return want >= 0 && compared >= want && spread.MatchString(last) && summaryField(t, last, "dead_letters") > 0
			})
			if n := summaryField(t, last, "replay_compared"); n < want || summaryField(t, last, "replay_differ") != 0 {
				t.Errorf("last summary %q: want %d windows or more compared, none differing", last, want)
			}
			// Not late firings: an instance behind the stream meets a
			// straggler before its window fired.
			for _, field := range []string{"late", "dead_letters"} {
				if summaryField(t, last, field) < 1 {
					t.Errorf("last summary %q: %s = 0, want the input's late and malformed records seen", last, field)
				}
			}
		})
	}
}

// syncBuffer is a bytes.Buffer the demo writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lastLine is the last complete line written, "" before the first.
func (s *syncBuffer) lastLine() string {
	text := s.String()
	text = text[:strings.LastIndexByte(text, '\n')+1]
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestDemoNothingLate: with count and global windows the view says why
// the generator's stragglers and too-late records are not late; with the
// others it says nothing.
func TestDemoNothingLate(t *testing.T) {
	for window, late := range map[string]bool{"tumbling": true, "sliding": true, "session": true, "calendar": true, "count": false, "global": false} {
		f, err := parseDemoFlags([]string{"--window", window}, new(bytes.Buffer))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := demoConfig(f, []string{"127.0.0.1:9092"}, 1, "")
		if err != nil {
			t.Fatal(err)
		}
		v := newView(new(bytes.Buffer), f, "kfake", "http://localhost:9090/metrics", cfg, nil, nil, nil)
		if got := v.state.NothingLate; (got == "") != late || !late && !strings.Contains(got, "nothing is late") {
			t.Errorf("newView(--window %s).state.NothingLate = %q, want a reason: %v", window, got, !late)
		}
	}
}

// TestDemoConfigChanged: with --change-at the demo's two configs are valid,
// the first at state.config_version 1, the second at 2 with 10s windows
// and max_duration added, and the second against the first's stored
// settings is a new generation that the run's restore does not refuse,
// in both partitionings.
func TestDemoConfigChanged(t *testing.T) {
	for _, partitioning := range []string{partitionByKey, partitionRepartition} {
		t.Run(partitioning, func(t *testing.T) {
			f, err := parseDemoFlags([]string{"--change-at", "20s", "--partitioning", partitioning}, new(bytes.Buffer))
			if err != nil {
				t.Fatal(err)
			}
			first, err := demoConfig(f, []string{"127.0.0.1:9092"}, 1, "")
			if err != nil {
				t.Fatalf("demoConfig() = %v", err)
			}
			next, err := demoConfigChanged(f, []string{"127.0.0.1:9092"}, 1, "")
			if err != nil {
				t.Fatalf("demoConfigChanged() = %v", err)
			}
			for _, c := range []config.Config{first, next} {
				if err := c.ValidateKafka(); err != nil {
					t.Errorf("ValidateKafka() = %v", err)
				}
			}
			got := fmt.Sprintf("v%d %v %q -> v%d %v %q", first.State.ConfigVersion, first.Window.Size, aggregateNames(first),
				next.State.ConfigVersion, next.Window.Size, aggregateNames(next))
			if want := `v1 5s ["calls" "total_duration" "avg_duration" "p99_duration"] -> v2 10s ["calls" "total_duration" "avg_duration" "p99_duration" "max_duration"]`; got != want {
				t.Errorf("the change is %s, want %s", got, want)
			}
			plan, err := next.PlanAgainst(&config.Stored{Version: first.State.ConfigVersion, State: first.StateSettings().Encode(),
				Identity: first.IdentitySettings().Encode(), Run: first.RunSettings().Encode()})
			if err != nil || plan.Verdict != config.NewGeneration {
				t.Fatalf("the changed config against the first: %+v, %v; want a new generation", plan, err)
			}
			if err := pipeline.Refusal(next, plan, 1); err != nil {
				t.Errorf("the run's restore refuses the change: %v", err)
			}
			plain, err := demoConfig(demoFlags{window: "tumbling", partitioning: partitioning, partitions: 3, listen: ":9090"}, []string{"127.0.0.1:9092"}, 1, "")
			if err != nil || plain.State.ConfigVersion != 0 || partitioning == partitionByKey && !plain.Watermark.GlobalScope() {
				t.Errorf("without --change-at: config_version %d, global watermark %v, %v; want the demo's config as before", plain.State.ConfigVersion, plain.Watermark.GlobalScope(), err)
			}
		})
	}
}

// TestDemoChangeRuns runs `aggregator demo --change-at`: halfway the
// instances drain and start again with the changed config, and the
// summary shows results of both config versions and each partition's
// cut-over.
func TestDemoChangeRuns(t *testing.T) {
	t.Parallel() // mostly waits on the wall clock
	both := regexp.MustCompile(` versions=1:[1-9][0-9]*,2:[1-9]`)
	last := runDemoUntil(t, []string{"demo", "--change-at", "3s", "--speed", "4", "--rate", "200", "--listen", "127.0.0.1:0"},
		func(line string) bool { return both.MatchString(line) })
	for _, want := range []string{"config changed at 3s", "cut-over T (UTC) of partition 0 at", "2 at"} {
		if !strings.Contains(last, want) {
			t.Errorf("last summary %q: want %q", last, want)
		}
	}
	if !both.MatchString(last) {
		t.Errorf("last summary %q: want results of config versions 1 and 2", last)
	}
}
