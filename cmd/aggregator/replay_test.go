package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// runReplay runs `aggregator replay` through run, as a user would.
func runReplay(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), append([]string{"replay"}, args...), nil, strings.NewReader(stdin), &stdout, &stderr)
	if err != nil {
		t.Fatalf("replay %v: %v (stderr %q)", args, err, stderr.String())
	}
	return stdout.String()
}

func checkGolden(t *testing.T, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(gotLines) || i < len(wantLines); i++ {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Errorf("%s line %d:\n got %s\nwant %s", path, i+1, g, w)
		}
	}
}

// TestReplayGolden is the worked example of
// docs/semantics.md#tumbling-windows-with-allowed-lateness through replay's
// code path; the golden files were checked by hand against its step-by-step
// description (see summarize).
func TestReplayGolden(t *testing.T) {
	for _, name := range []string{"lateness_0s", "lateness_2s"} {
		t.Run(name, func(t *testing.T) {
			got := runReplay(t, "", "--config", "testdata/"+name+".yaml", "--input", "testdata/000_calls.csv")
			checkGolden(t, "testdata/000_calls."+name+".golden", got, *update)
		})
	}
}

// summarize reduces replay output to one short line per emission, so the
// manual's prose can be asserted independently of the golden files.
func summarize(t *testing.T, out string) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var v struct {
			Type        string             `json:"type"`
			Start       string             `json:"start"`
			Count       int64              `json:"count"`
			Aggregates  map[string]float64 `json:"aggregates"`
			Firing      string             `json:"firing"`
			Revision    int64              `json:"revision"`
			Offset      int64              `json:"offset"`
			Watermark   int64              `json:"watermark"`
			WindowStart int64              `json:"window_start"`
			WindowEnd   int64              `json:"window_end"`
			Key         map[string]any     `json:"key"`
			Error       string             `json:"error"`
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		switch v.Type {
		case "result":
			lines = append(lines, v.Type+" "+v.Start+" "+v.Firing+" rev="+itoa(v.Revision)+" count="+itoa(v.Count)+" wm="+itoa(v.Watermark))
		case "retract":
			lines = append(lines, fmt.Sprintf("retract %v [%d,%d)", v.Key, v.WindowStart, v.WindowEnd))
		default:
			lines = append(lines, v.Type+" offset="+itoa(v.Offset)+" wm="+itoa(v.Watermark))
		}
	}
	return lines
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestReplaySpecExamples(t *testing.T) {
	const base = 1922350200000 // 2030-12-01T10:10:00Z
	tests := map[string]struct {
		config string
		want   []string
	}{
		"lateness 0s": {"testdata/lateness_0s.yaml", []string{
			"result 2030-12-01T10:10:00Z on_time rev=0 count=4 wm=" + itoa(base+4999),
			"late offset=5 wm=" + itoa(base+4999),
			"late offset=6 wm=" + itoa(base+4999),
			"late offset=8 wm=" + itoa(base+6999),
			"result 2030-12-01T10:10:05Z on_time rev=0 count=2 wm=" + itoa(base+9999),
			"result 2030-12-01T10:10:10Z on_time rev=0 count=1 wm=9223372036854775807",
		}},
		"lateness 2s": {"testdata/lateness_2s.yaml", []string{
			"result 2030-12-01T10:10:00Z on_time rev=0 count=4 wm=" + itoa(base+4999),
			"result 2030-12-01T10:10:00Z late rev=1 count=5 wm=" + itoa(base+4999),
			"result 2030-12-01T10:10:00Z late rev=2 count=6 wm=" + itoa(base+4999),
			"late offset=8 wm=" + itoa(base+6999),
			"result 2030-12-01T10:10:05Z on_time rev=0 count=2 wm=" + itoa(base+9999),
			"result 2030-12-01T10:10:10Z on_time rev=0 count=1 wm=9223372036854775807",
		}},
		"on_close, lateness 2s": {"testdata/on_close_2s.yaml", []string{
			"result 2030-12-01T10:10:00Z final rev=0 count=6 wm=" + itoa(base+6999),
			"late offset=8 wm=" + itoa(base+6999),
			"result 2030-12-01T10:10:05Z final rev=0 count=2 wm=9223372036854775807",
			"result 2030-12-01T10:10:10Z final rev=0 count=1 wm=9223372036854775807",
		}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := summarize(t, runReplay(t, "", "--config", tt.config, "--input", "testdata/000_calls.csv"))
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("replay %s =\n%s\nwant\n%s", tt.config, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestReplaySeed001 checks the temperature example of
// testdata/001_temperature.*: the first 15s window fires when the
// record at 1607654012161 arrives, not before.
func TestReplaySeed001(t *testing.T) {
	data, err := os.ReadFile("testdata/001_temperature.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	before := runReplay(t, strings.Join(lines[:6], ""), "--config", "testdata/001_temperature.yaml", "--no-flush")
	if before != "" {
		t.Errorf("replay of the first 6 records = %q, want no output", before)
	}
	at := runReplay(t, strings.Join(lines[:7], ""), "--config", "testdata/001_temperature.yaml", "--no-flush")
	want := `{"type":"result","key":{"id":"1"},"window_start":1607653995000,"window_end":1607654010000,"start":"2020-12-11T02:33:15Z","end":"2020-12-11T02:33:30Z","count":4,"aggregates":{"max_temp":22},"firing":"on_time","revision":0,"watermark":1607654010160}` + "\n"
	if at != want {
		t.Errorf("replay of the first 7 records =\n%s\nwant\n%s", at, want)
	}
	checkGolden(t, "testdata/001_temperature.golden", runReplay(t, string(data), "--config", "testdata/001_temperature.yaml"), *update)
}

// TestReplaySessions: examples/sessions.jsonl through examples/sessions.yaml
// (10s gap, per-record "idle" gap, 5s lateness, W = max t - 1). Worked by
// hand:
//   - t=30000 takes W to 29999: u2 [2000,12000) and u1 [1000,15000) (5000
//     extended it) fire, in order of end, and are dropped (cleanup 16999,
//     19999).
//   - u1 at 12000: [12000,22000) meets no session and its cleanup 26999 is
//     past: a late event.
//   - u1 at 45000 (W 44999) fires [30000,40000); 41000 extends [45000,55000)
//     back to [41000,55000), which fires at 60000 (W 59999).
//   - u1 at 60000 with idle 2s: [60000,62000); u2 at 70000 with idle 3000:
//     [70000,73000). W 69999 fires u1 [60000,62000), then u2 [58000,68000).
//   - u2 at 59000: [59000,69000) extends the fired [58000,68000) (cleanup
//     72999 not past): it is retracted and [58000,69000) fires late, rev 0.
//   - u2 at 67000: [67000,77000) bridges [58000,69000) (fired: retracted)
//     and [70000,73000) (never fired): [58000,77000), not due.
//   - u2 at 66000 lies inside it: no merge.
//   - idle "bad" and 0 are bad_gap dead letters; null is the 10s gap.
//   - The flush fires u2 [58000,77000) with its 5 records, then u3.
func TestReplaySessions(t *testing.T) {
	out := runReplay(t, "", "--config", "../../examples/sessions.yaml", "--input", "../../examples/sessions.jsonl")
	const epoch = "1970-01-01T00:00:"
	want := []string{
		"result " + epoch + "02Z on_time rev=0 count=1 wm=29999",
		"result " + epoch + "01Z on_time rev=0 count=2 wm=29999",
		"late offset=4 wm=29999",
		"result " + epoch + "30Z on_time rev=0 count=1 wm=44999",
		"result " + epoch + "41Z on_time rev=0 count=2 wm=59999",
		"result 1970-01-01T00:01:00Z on_time rev=0 count=1 wm=69999",
		"result " + epoch + "58Z on_time rev=0 count=1 wm=69999",
		"retract map[user:u2] [58000,68000)",
		"result " + epoch + "58Z late rev=0 count=2 wm=69999",
		"retract map[user:u2] [58000,69000)",
		"dead_letter offset=13 wm=0",
		"dead_letter offset=14 wm=0",
		"result " + epoch + "58Z on_time rev=0 count=5 wm=9223372036854775807",
		"result 1970-01-01T00:01:12Z on_time rev=0 count=1 wm=9223372036854775807",
	}
	if got := summarize(t, out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("replay sessions =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(out, `"error":"bad_gap: field \"idle\": \"bad\" is neither a number of ms nor a duration"`) {
		t.Errorf("replay sessions: no bad_gap dead letter for idle \"bad\" in\n%s", out)
	}
	checkGolden(t, "testdata/sessions.golden", out, *update)
}

// TestReplayHelpKcatIsASwitch: flag prints a back-quoted word in a usage
// as the flag's value name, which made -kcat read as if it took one.
func TestReplayHelpKcatIsASwitch(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"replay", "--help"}, nil, nil, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "\n  -kcat\n") {
		t.Errorf("replay --help shows -kcat with a value:\n%s", stderr.String())
	}
}

// TestReplayKcatOneStatePerKey checks that replay --kcat keeps one state
// per group key across the dump's partitions, W the minimum over them: a
// user whose records are on two partitions gets one result of all of them,
// fired once both partitions have passed the window.
func TestReplayKcatOneStatePerKey(t *testing.T) {
	cfg := t.TempDir() + "/spread.yaml"
	if err := os.WriteFile(cfg, []byte(`
source: {topics: [calls], key: [user], timestamp: {field: t, layout: unix_ms}}
window: {size: 10s}
aggregates: [{name: n, fn: count}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var dump strings.Builder
	for i, r := range []struct {
		partition int
		t         int64
	}{{0, 1000}, {1, 2000}, {0, 3000}, {0, 25000}, {1, 4000}, {1, 12000}} {
		fmt.Fprintf(&dump, `{"topic":"calls","partition":%d,"offset":%d,"ts":0,"key":"req-%d","payload":"{\"user\":\"u\",\"t\":%d}"}`+"\n", r.partition, i, i, r.t)
	}
	got := runReplay(t, dump.String(), "--config", cfg, "--kcat", "--no-flush")
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 1 {
		t.Fatalf("replay --kcat wrote %d lines, want one result:\n%s", len(lines), got)
	}
	var res struct {
		Key        map[string]string  `json:"key"`
		Aggregates map[string]float64 `json:"aggregates"`
		Revision   int                `json:"revision"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &res); err != nil {
		t.Fatal(err)
	}
	if res.Key["user"] != "u" || res.Aggregates["n"] != 4 || res.Revision != 0 {
		t.Errorf("replay --kcat = %s; want one result of user u counting the 4 records of [0s,10s) from both partitions", lines[0])
	}
}

// TestReplayKcatScopePartition: with watermark.scope partition, replay
// --kcat follows each partition's own watermark, as the service does: its
// output is the union of the replays of each partition's records alone,
// and a lagging partition holds no other partition's windows back (with
// scope global the same dump gives other results and late events).
func TestReplayKcatScopePartition(t *testing.T) {
	doc := `
source: {topics: [calls], key: ["$key"], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
watermark: {max_out_of_orderness: 1s, scope: %s}
window: {size: 2s, allowed_lateness: 500ms}
aggregates: [{name: n, fn: count}]
`
	dir := t.TempDir()
	cfgs := map[string]string{}
	for _, scope := range []string{"partition", "global"} {
		cfgs[scope] = dir + "/" + scope + ".yaml"
		if err := os.WriteFile(cfgs[scope], []byte(fmt.Sprintf(doc, scope)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Partition 1 is 10 s behind partition 0; each has stragglers 3 s
	// behind its own records.
	parts := make([]strings.Builder, 2)
	var dump strings.Builder
	for i := range 120 {
		p := i % 2
		ts := int64(20_000 + 250*i - 10_000*p)
		if i%7 == 3 {
			ts -= 3_000
		}
		line := fmt.Sprintf(`{"topic":"calls","partition":%d,"offset":%d,"ts":0,"key":"u%d","payload":"{\"t\":%d}"}`+"\n", p, i/2, p+2*(i%3), ts)
		dump.WriteString(line)
		parts[p].WriteString(line)
	}
	sorted := func(out string) []string {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		slices.Sort(lines)
		return lines
	}
	got := sorted(runReplay(t, dump.String(), "--config", cfgs["partition"], "--kcat"))
	var want []string
	for p := range parts {
		want = append(want, sorted(runReplay(t, parts[p].String(), "--config", cfgs["partition"], "--kcat"))...)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("replay --kcat with scope partition:\n%s\nwant each partition's replay alone:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, `"type":"late"`) }) {
		t.Error("no late event: the dump does not test the partitions' own watermarks")
	}
	if global := sorted(runReplay(t, dump.String(), "--config", cfgs["global"], "--kcat")); slices.Equal(global, got) {
		t.Error("scope global gives the same output: the dump does not test the scope")
	}
}
