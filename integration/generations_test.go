package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"aggregator/internal/config"
	"aggregator/internal/consumer"
	"aggregator/internal/producer"
)

// Changing the config of a running service (docs/changing-config.md) on the real
// clients: a config runs over the first half of the stream and stops;
// the next config, with other state settings at a higher
// state.config_version, restores its changelog and reads the second
// half. Every result read (read_committed) is a window of the replay of
// its own generation's config (the header aggregator.config_version says
// which) over the whole stream, none twice; every window of the old
// config's replay that starts before the earliest partition's cut-over,
// and of the new config's from the latest, is there: no record is lost at
// the seam.

// genYAML is a config of these tests: partitioning and scope (by_key
// with watermark.scope partition; by_key_global: by_key with the
// default scope, global), the window, the aggregates and
// state.config_version.
func genYAML(partitioning, window, aggregates string, version int) string {
	scope := ""
	switch partitioning {
	case "by_key":
		scope = ", scope: partition"
	case "by_key_global":
		partitioning = "by_key"
	}
	return fmt.Sprintf(`
source:
  format: json
  key: [sid]
  partitioning: %s
  timestamp: {field: t, layout: unix_ms}
watermark: {max_out_of_orderness: 1s%s}
window: %s
aggregates: %s
state: {config_version: %d}
`, partitioning, scope, window, aggregates, version)
}

// genResult is a result read from the results topic.
type genResult struct {
	value   string
	version int64
	start   int64
}

func readGenResults(t testing.TB, brokers []string) []genResult {
	t.Helper()
	var out []genResult
	for _, r := range readAll(t, brokers, resultsTopic) {
		g := genResult{value: watermarkField.ReplaceAllString(string(r.Value), ""), version: -1}
		for _, h := range r.Headers {
			if h.Key == producer.HeaderConfigVersion {
				g.version, _ = strconv.ParseInt(string(h.Value), 10, 64)
			}
		}
		var v struct {
			Start int64 `json:"window_start"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("result %s: %v", r.Value, err)
		}
		g.start = v.Start
		out = append(out, g)
	}
	return out
}

// cutovers are the cut-over times the instance with registry reg set
// (aggregator_cutover_timestamp_seconds), in ms, by changelog partition.
func cutovers(t testing.TB, reg *prometheus.Registry) map[string]int64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, mf := range mfs {
		if mf.GetName() != "aggregator_cutover_timestamp_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = int64(math.Round(m.GetGauge().GetValue() * 1000))
		}
	}
	return out
}

// genPhase is one config of a change test, run over its share of the
// stream: its window and aggregates, state.config_version, state.cutover
// ("future": about three quarters into the stream, after what the first
// half has seen, on the 5-second grid; "past": 5 s into it; "" none), and whether its first instance dies (a crash:
// nothing more committed) once its partitions cut over, another one of
// the same config going on.
type genPhase struct {
	window, aggregates string
	version            int
	cutover            string
	crash              bool
}

func TestConfigChangeRestart(t *testing.T) {
	t.Parallel()
	const (
		ms1 = "{type: tumbling, size: 1s, allowed_lateness: 2s}"
		ms5 = "{type: tumbling, size: 5s, allowed_lateness: 2s}"
		one = "[{name: calls, fn: count}]"
		two = "[{name: calls, fn: count}, {name: longest, fn: max, field: d}]"
	)
	cases := []struct {
		name, partitioning string
		phases             []genPhase
	}{
		{"by_key_1s_to_5s", "by_key", []genPhase{{ms1, one, 1, "", false}, {ms5, one, 2, "", false}}},
		{"repartition_added_aggregate", "repartition", []genPhase{{ms1, one, 1, "", false}, {ms5, two, 2, "", false}}},
		{"by_key_crash_at_the_cutover", "by_key", []genPhase{{ms1, one, 1, "", false}, {ms5, two, 2, "", true}}},
		{"repartition_crash_at_the_cutover", "repartition", []genPhase{{ms1, one, 1, "", false}, {ms5, one, 2, "", true}}},
		{"by_key_session_gap", "by_key", []genPhase{{"{type: session, gap: 300ms, allowed_lateness: 1s}", one, 1, "", false},
			{"{type: session, gap: 600ms, allowed_lateness: 1s}", two, 2, "", false}}},
		{"repartition_session_gap", "repartition", []genPhase{{"{type: session, gap: 300ms, allowed_lateness: 1s}", one, 1, "", false},
			{"{type: session, gap: 600ms, allowed_lateness: 1s}", one, 2, "", false}}},
		{"by_key_rollback", "by_key", []genPhase{{ms1, one, 1, "", false}, {ms5, two, 2, "", false}, {ms1, one, 3, "", false}}},
		{"by_key_cutover_future", "by_key", []genPhase{{ms1, one, 1, "", false}, {ms5, one, 2, "future", false}}},
		{"repartition_cutover_past", "repartition", []genPhase{{ms1, one, 1, "", false}, {ms5, one, 2, "past", false}}},
		{"by_key_global_crash_at_the_cutover", "by_key_global", []genPhase{{ms1, one, 1, "", false}, {ms5, two, 2, "", true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // its own broker
			runPhases(t, tc.partitioning, 25, tc.phases)
		})
	}
}

// TestConfigChangeGlobalScope: by_key with the default watermark.scope,
// global (every partition's windows following the merged watermark),
// restarted from 1-minute windows counting calls to 5-minute windows
// that also take the longest: each window is its own generation's
// replay, none lost at the seam. A record a second of event time.
func TestConfigChangeGlobalScope(t *testing.T) {
	t.Parallel() // its own broker
	runPhases(t, "by_key_global", 1000, []genPhase{
		{"{type: tumbling, size: 1m, allowed_lateness: 2s}", "[{name: calls, fn: count}]", 1, "", false},
		{"{type: tumbling, size: 5m, allowed_lateness: 2s}", "[{name: calls, fn: count}, {name: longest, fn: max, field: d}]", 2, "", false},
	})
}

// runPhases runs phases over the stream (a record every step ms of event
// time) in turn, one after another on a broker of its own, and checks
// what a read_committed reader of the results sees against each
// generation's replay.
func runPhases(t *testing.T, partitioning string, step int64, phases []genPhase) {
	runPhasesEdited(t, partitioning, step, phases, phaseEdit{})
}

// phaseEdit changes what runPhasesEdited runs: the stream (input), and
// each phase's config file (yaml, given the phase's index).
type phaseEdit struct {
	input func([]keyedInput) []keyedInput
	yaml  func(phase int, y string) string
	// mayFilter says which input values a phase's filter may reject:
	// checkAccounted does not judge them (the generation whose span holds
	// one decides, at a cut-over the test does not know in advance).
	mayFilter func(value string) bool
}

func runPhasesEdited(t *testing.T, partitioning string, step int64, phases []genPhase, edit phaseEdit) {
	const parts = 4
	n := 1200
	if raceEnabled {
		n = 600
	}
	input := genInputStep(parts, n, step)
	if edit.input != nil {
		input = edit.input(input)
	}
	kc := newCluster(t, parts)
	brokers := kc.ListenAddrs()
	cfgs := make([]config.Config, len(phases))
	wants := make([][]string, len(phases)) // each generation's replay, without the firing watermark
	for i, ph := range phases {
		y := genYAML(partitioning, ph.window, ph.aggregates, ph.version)
		if ph.cutover != "" {
			at := time.UnixMilli(int64(base) + 5_000).UTC()
			if ph.cutover == "future" {
				at = time.UnixMilli(int64(base) + int64(n)*step*3/4/5_000*5_000).UTC() // a 5-second window's start
			}
			y = strings.Replace(y, "state: {", "state: {cutover: "+at.Format(time.RFC3339Nano)+", ", 1)
		}
		if edit.yaml != nil {
			y = edit.yaml(i, y)
		}
		cfgs[i] = parseConfig(t, y, brokers)
		wants[i] = contents(replayKcatN(t, cfgs[i], parts, input, nil).results)
	}
	// lo[i], hi[i]: the earliest and latest cut-over of phase i's
	// generation over the partitions (phase 0: none).
	lo, hi := make([]int64, len(phases)), make([]int64, len(phases))
	lo[0], hi[0] = math.MinInt64, math.MinInt64
	share := len(input) / len(phases)
	var last *service
	for i, ph := range phases {
		slice := input[i*share : (i+1)*share]
		if i == len(phases)-1 {
			slice = input[i*share:]
		}
		reg := prometheus.NewRegistry()
		svc := startWith(t, cfgs[i], nil, reg)
		if i > 0 {
			waitFor(t, waitTimeout, "the cut-over of every state partition", func() bool {
				cs := cutovers(t, reg)
				lo[i], hi[i] = math.MaxInt64, math.MinInt64
				for _, c := range cs {
					lo[i], hi[i] = min(lo[i], c), max(hi[i], c)
				}
				return len(cs) == parts
			})
			if at, ok := cfgs[i].State.CutoverMillis(); ok && at > int64(base)+int64(i*share)*step && (lo[i] != at || hi[i] != at) {
				t.Errorf("phase %d cut over at %d to %d, want state.cutover %d everywhere", i, lo[i], hi[i], at)
			}
			if ph.crash {
				svc.crash()
				svc = start(t, cfgs[i], nil)
			}
		}
		produceSliced(t, brokers, cfgs[i].Source.Group, slice)
		if i < len(phases)-1 {
			svc.stop(t)
		}
		last = svc
	}
	checkPhases(t, brokers, phases, wants, lo, hi, "exactly_once", func() { last.stop(t) })
	checkAccounted(t, brokers, input, "exactly_once", edit.mayFilter)
}

// checkPhases judges what a read_committed reader of the results topic
// sees after phases ran over the stream: wants[i] is phase i's replay
// (without the firing watermark), lo[i] and hi[i] the earliest and
// latest cut-over of its generation over the partitions. It waits until
// every window the generations must have fired is there, calls stop
// (every instance's graceful end), and checks that each result is a
// window of its own generation's replay on the right side of its
// cut-overs, no (key, window, revision) read twice (at_least_once: a
// repeat is identical), and that every phase has results.
func checkPhases(t *testing.T, brokers []string, phases []genPhase, wants [][]string, lo, hi []int64, delivery string, stop func()) {
	t.Helper()
	in := make([]map[string]bool, len(phases))
	for i := range phases {
		in[i] = map[string]bool{}
		for _, v := range wants[i] {
			in[i][v] = true
		}
	}
	// Sessions at a seam are not their replay's: an old generation's
	// session takes no record from T on (it ends where the old config's
	// would have gone on past T), a new one's takes none before T (it
	// starts where the new config's began before T). A session of phase
	// i is at a seam if it ends after the next phase's earliest T, or
	// starts before the end of a session of its replay that spans one of
	// its own cut-overs, for its key.
	seams := make([]map[string]int64, len(phases))
	for i, ph := range phases {
		seams[i] = map[string]int64{}
		if !strings.Contains(ph.window, "session") || i == 0 {
			continue
		}
		for _, v := range wants[i] {
			if w := windowOf(t, v); w.Start < hi[i] && w.End >= lo[i] {
				seams[i][w.Key] = max(seams[i][w.Key], w.End)
			}
		}
	}
	atSeam := func(i int, v string) bool {
		if !strings.Contains(phases[i].window, "session") {
			return false
		}
		w := windowOf(t, v)
		return i+1 < len(phases) && w.End >= lo[i+1] || w.Start < seams[i][w.Key] // sessions that touch merge
	}
	// The windows each generation must have fired by the end of the
	// stream: those of its replay that start where no partition has
	// cut over to another generation.
	need := map[string]bool{}
	for i := range phases {
		from, until := hi[i], int64(math.MaxInt64)
		if i+1 < len(phases) {
			until = lo[i+1]
		}
		for _, v := range wants[i] {
			if s := startOf(t, v); s >= from && s < until && !atSeam(i, v) {
				need[v] = true
			}
		}
	}
	var got []genResult
	waitForf(t, waitTimeout, time.Second, func() bool {
		got = readGenResults(t, brokers)
		seen := map[string]bool{}
		for _, g := range got {
			if need[g.value] {
				seen[g.value] = true
			}
		}
		return len(seen) == len(need)
	}, func() string {
		return fmt.Sprintf("%d windows of the replays in the results topic (cut-overs %v to %v; %d results)", len(need), lo, hi, len(got))
	})
	stop()
	if delivery == "at_least_once" {
		checkRepeats(t, readAll(t, brokers, resultsTopic))
	} else {
		seen := map[string]bool{} // (key, window, firing and revision)
		for _, r := range readAll(t, brokers, resultsTopic) {
			if k := string(r.Key) + revision(r.Value); r.Value != nil && seen[k] {
				t.Errorf("result %s %s read twice (now %s)", r.Key, revision(r.Value), r.Value)
			} else {
				seen[k] = true
			}
		}
	}
	got = readGenResults(t, brokers)
	dup := map[string]bool{}
	gens := map[int64]int{}
	for _, g := range got {
		if dup[g.value] && delivery != "at_least_once" {
			t.Errorf("result %s read twice", g.value)
		}
		dup[g.value] = true
		gens[g.version]++
		i := slices.IndexFunc(phases, func(ph genPhase) bool { return int64(ph.version) == g.version })
		switch {
		case i < 0:
			t.Errorf("result %s has %s %d, no phase's", g.value, producer.HeaderConfigVersion, g.version)
		case !in[i][g.value] && !atSeam(i, g.value):
			var same []string
			for _, v := range wants[i] {
				if windowOf(t, v).Key == windowOf(t, g.value).Key {
					same = append(same, fmt.Sprint(windowOf(t, v)))
				}
			}
			t.Errorf("generation %d's result %s is not a window of its config's replay (cut-overs %v to %v; the replay's windows of its key %v)", g.version, g.value, lo, hi, same)
		case g.start < lo[i] || i+1 < len(phases) && g.start >= hi[i+1]:
			t.Errorf("generation %d's result %s is on the wrong side of its cut-overs", g.version, g.value)
		}
	}
	for _, ph := range phases {
		if gens[int64(ph.version)] == 0 {
			t.Errorf("results by generation: %v, want every phase's", gens)
		}
	}
}

// TestConfigChangeFilter: a change of source.filter alone, in both
// partitioning modes (docs/changing-config.md#generations-and-the-cut-over: records go to every window of every live
// generation that contains them and whose filter accepts them). Each
// record has fields a and b, 0 or 1 at random; the first config keeps
// a = 1, the second b = 1 (the last record of each partition has both:
// it moves every watermark past the stream). In repartition mode stage 1
// runs the second config after the restart and forwards what its filter
// rejects (state.repartition_format 3): the old generation's windows
// still open at the restart get the records of a = 1 read after it, as
// the first config's replay has them.
func TestConfigChangeFilter(t *testing.T) {
	t.Parallel()
	const (
		ms1 = "{type: tumbling, size: 1s, allowed_lateness: 2s}"
		one = "[{name: calls, fn: count}, {name: longest, fn: max, field: d}]"
	)
	for _, partitioning := range []string{"repartition", "by_key"} {
		t.Run(partitioning, func(t *testing.T) {
			t.Parallel() // its own broker
			runPhasesEdited(t, partitioning, 25, []genPhase{{ms1, one, 1, "", false}, {ms1, one, 2, "", false}}, filterChange())
		})
	}
}

// filterChange edits the stream and the configs of a change of
// source.filter alone: each record gets fields a and b, 0 or 1 at random
// (1 both in the last record of each partition, which moves every
// watermark past the stream); the first config keeps a = 1, the second
// b = 1.
func filterChange() phaseEdit {
	return phaseEdit{
		input: func(in []keyedInput) []keyedInput {
			rng := rand.New(rand.NewPCG(31, 7))
			out := make([]keyedInput, len(in))
			for i, r := range in {
				a, b := rng.IntN(2), rng.IntN(2)
				if r.key == "end" {
					a, b = 1, 1
				}
				r.value = fmt.Sprintf(`{"a":%d,"b":%d,`, a, b) + r.value[1:]
				out[i] = r
			}
			return out
		},
		mayFilter: func(v string) bool { return !strings.HasPrefix(v, `{"a":1,"b":1,`) },
		yaml: func(i int, y string) string {
			field := [...]string{"a", "b"}[i]
			return strings.Replace(y, "  format: json\n", "  format: json\n  filter: [{field: "+field+", equals: 1}]\n", 1)
		},
	}
}

// checkAccounted checks that no record of input is lost at a seam: each
// is in the latest result of a window of its key (a retracted session's
// latest is its tombstone: none), of one generation or more (an old
// generation's window that starts before T holds the records of its span
// from T on too), or is a late event or a dead letter, once (by source
// offset; at_least_once may repeat them), and nothing else is either.
// The one record a partition genInput puts after the stream is in a
// window that never fires. The input is produced in order, one topic:
// a record's offset is its rank in its partition.
//
// mayFilter (nil: none) names the records a filter may reject: they are
// not judged, but may be late events or dead letters.
func checkAccounted(t *testing.T, brokers []string, input []keyedInput, delivery string, mayFilter func(value string) bool) {
	t.Helper()
	latest := map[string][]byte{}
	for _, r := range readAll(t, brokers, resultsTopic) { // one partition: in the order written
		latest[string(r.Key)] = r.Value
	}
	windows := map[string][]window{} // by key
	for _, v := range latest {
		if v != nil {
			w := windowOf(t, string(v))
			windows[w.Key] = append(windows[w.Key], w)
		}
	}
	once := func(topic string) map[string]bool {
		seen := map[string]bool{}
		for _, r := range readAll(t, brokers, topic) {
			if seen[durProvenance(r)] && delivery != "at_least_once" {
				t.Errorf("%s: the record at %s twice", topic, durProvenance(r))
			}
			seen[durProvenance(r)] = true
		}
		return seen
	}
	late, dead := once(lateTopic), once(dlqTopic)
	offsets := map[int32]int{}
	lost, accounted := 0, 0
	for _, in := range input {
		at := fmt.Sprintf("%d/%d", in.partition, offsets[in.partition])
		offsets[in.partition]++
		if mayFilter != nil && mayFilter(in.value) {
			delete(late, at)
			delete(dead, at)
			continue
		}
		var v struct {
			Sid string `json:"sid"`
			T   any    `json:"t"`
		}
		if err := json.Unmarshal([]byte(in.value), &v); err != nil {
			t.Fatalf("input %s: %v", in.value, err)
		}
		ts, ok := v.T.(float64)
		switch {
		case late[at] || dead[at]:
			if late[at] && dead[at] {
				t.Errorf("the record at %s (%s) is a late event and a dead letter", at, in.value)
			}
			delete(late, at)
			delete(dead, at)
		case !ok:
			t.Errorf("the malformed record at %s (%s) is no dead letter", at, in.value)
		case in.key == "end":
			continue
		case !slices.ContainsFunc(windows[fmt.Sprintf(`{"sid":%q}`, v.Sid)], func(w window) bool { return w.Start <= int64(ts) && int64(ts) < w.End }):
			if lost++; lost <= 5 {
				t.Errorf("the record at %s (%s) is in no window of the results, no late event, no dead letter", at, in.value)
			}
			continue
		}
		accounted++
	}
	if lost > 5 {
		t.Errorf("%d records lost in all", lost)
	}
	if len(late)+len(dead) > 0 {
		t.Errorf("late events %v and dead letters %v of no input record", late, dead)
	}
	if len(dead) == 0 && accounted == 0 {
		t.Errorf("no record accounted for: the check tests nothing")
	}
}

// genInput is the stream of these tests: parts partitions in turn, each
// with keys of its own (by_key), 25 ms of event time a record, one in 31
// up to 800 ms behind (within max_out_of_orderness: whether a record is
// late does not depend on how the partitions interleave), one in 97
// malformed, and one record a partition 30 s after the stream's end, which
// moves every watermark past the stream's windows (its own does not fire).
func genInput(parts int32, n int) []keyedInput { return genInputStep(parts, n, 25) }

// genInputStep is genInput with a record every step ms of event time
// (the last records step*1200 ms after the stream's end).
func genInputStep(parts int32, n int, step int64) []keyedInput {
	rng := rand.New(rand.NewPCG(29, 3))
	var out []keyedInput
	for i := range n {
		p := int32(i) % parts
		t := int64(base) + int64(i)*step
		if i%31 == 0 {
			t -= rng.Int64N(800)
		}
		v := fmt.Sprintf(`{"sid":"p%d-u%d","t":%d,"d":%d}`, p, rng.IntN(4), t, rng.IntN(50))
		if i%97 == 0 {
			v = `{"sid":"u1","t":"soon","d":1}`
		}
		out = append(out, keyedInput{p, fmt.Sprintf("req-%d", i), v})
	}
	for p := range parts {
		out = append(out, keyedInput{p, "end", fmt.Sprintf(`{"sid":"p%d-u0","t":%d,"d":1}`, p, int64(base)+int64(n)*step+1200*step)})
	}
	return out
}

// window is what windowOf reads of a result value.
type window struct {
	Key        string
	Start, End int64
}

// windowOf is a result value's key (its JSON) and window.
func windowOf(t testing.TB, value string) window {
	var v struct {
		Key   json.RawMessage `json:"key"`
		Start int64           `json:"window_start"`
		End   int64           `json:"window_end"`
	}
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		t.Fatalf("result %s: %v", value, err)
	}
	return window{string(v.Key), v.Start, v.End}
}

// startOf is a result value's window_start.
func startOf(t testing.TB, value string) int64 {
	var v struct {
		Start int64 `json:"window_start"`
	}
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		t.Fatalf("result %s: %v", value, err)
	}
	return v.Start
}

// TestConfigChangeRefused: against the state of a running config, one
// with another window at the same state.config_version, or another
// source.key, exits 2 (a config error) naming the key, and writes
// nothing: the changelog and the results topic are as they were.
func TestConfigChangeRefused(t *testing.T) {
	t.Parallel()
	first := genInput(2, 200)
	kc := newCluster(t, 2)
	brokers := kc.ListenAddrs()
	old := genYAML("by_key", "{type: tumbling, size: 1s}", "[{name: calls, fn: count}]", 1)
	cfg := parseConfig(t, old, brokers)
	s := start(t, cfg, nil)
	produceSliced(t, brokers, cfg.Source.Group, first)
	s.stop(t)
	before := endOffsets(t, brokers, cfg.State.ChangelogTopic, resultsTopic)
	for _, c := range []struct{ name, yaml, key string }{
		{"equal version", genYAML("by_key", "{type: tumbling, size: 5s}", "[{name: calls, fn: count}]", 1), "state.config_version"},
		{"another key", genYAML("by_key", "{type: tumbling, size: 1s}", "[{name: calls, fn: count}]", 2), "source.key"},
	} {
		next := parseConfig(t, c.yaml, brokers)
		if c.key == "source.key" {
			next.Source.Key = []string{"d"}
		}
		svc, err := consumer.NewWithClock(next, zerolog.Nop(), prometheus.NewRegistry(), time.Now, kgo.FetchMaxWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		err = svc.Run(ctx)
		cancel()
		svc.Close()
		var ke *config.KeyError
		if !errors.As(err, &ke) || ke.Key != c.key || !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%s: Run = %v, want a config error (exit 2) naming %s", c.name, err, c.key)
		}
		if after := endOffsets(t, brokers, cfg.State.ChangelogTopic, resultsTopic); !maps2Equal(after, before) {
			t.Errorf("%s: end offsets %v after the refusal, want %v: nothing written", c.name, after, before)
		}
	}
}

// endOffsets are the end offsets of topics, by topic and partition.
func endOffsets(t testing.TB, brokers []string, topics ...string) map[string]int64 {
	t.Helper()
	ends, err := kadm.NewClient(client(t, brokers)).ListEndOffsets(context.Background(), topics...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[fmt.Sprintf("%s[%d]", o.Topic, o.Partition)] = o.Offset })
	return out
}

func maps2Equal(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestConfigChangeRolling is a rolling upgrade of two instances, one pod
// at a time: both run the old config over the first third of the stream;
// one is replaced by an instance of the new config (its partitions move
// to the old one, then half of them to the new one, which cuts them
// over) and the second third is read by an old and a new instance side
// by side; then the other is replaced (the new instance cuts over the
// partitions it takes) for the last third. A reader sees each
// generation's replay, as in TestConfigChangeRestart. With by_key and
// watermark.scope global the instances share their partitions'
// watermarks through the watermark topic, and an old instance that takes
// a partition cut over runs its newest generation.
func TestConfigChangeRolling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, partitioning string
		filter             bool // a change of source.filter alone (filterChange), not of the window and aggregates
	}{{"by_key", "by_key", false}, {"by_key_global", "by_key_global", false}, {"repartition", "repartition", false}, {"repartition_filter", "repartition", true}} {
		partitioning := tc.partitioning
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const parts = 4
			n := 1200
			if raceEnabled {
				n = 600
			}
			input := genInput(parts, n)
			kc := newCluster(t, parts)
			brokers := kc.ListenAddrs()
			y1 := genYAML(partitioning, "{type: tumbling, size: 1s, allowed_lateness: 2s}", "[{name: calls, fn: count}]", 1)
			y2 := genYAML(partitioning, "{type: tumbling, size: 5s, allowed_lateness: 2s}", "[{name: calls, fn: count}, {name: longest, fn: max, field: d}]", 2)
			if tc.filter {
				edit := filterChange()
				input = edit.input(input)
				y1, y2 = edit.yaml(0, y1), edit.yaml(1, genYAML(partitioning, "{type: tumbling, size: 1s, allowed_lateness: 2s}", "[{name: calls, fn: count}]", 2))
			}
			cfg1, cfg2 := parseConfig(t, y1, brokers), parseConfig(t, y2, brokers)
			want1, want2 := contents(replayKcatN(t, cfg1, parts, input, nil).results), contents(replayKcatN(t, cfg2, parts, input, nil).results)
			in1, in2 := map[string]bool{}, map[string]bool{}
			for _, v := range want1 {
				in1[v] = true
			}
			for _, v := range want2 {
				in2[v] = true
			}
			group, each := cfg1.Source.Group, 2
			if partitioning == "repartition" {
				each = 4 // the input's partitions and the repartition topic's
			}
			third := len(input) / 3
			a, b := start(t, cfg1, nil), start(t, cfg1, nil)
			waitEven(t, brokers, group, 2, each)
			produceSliced(t, brokers, group, input[:third])
			a.stop(t)
			reg := prometheus.NewRegistry()
			a2 := startWith(t, cfg2, nil, reg)
			waitEven(t, brokers, group, 2, each)
			produceSliced(t, brokers, group, input[third:2*third])
			b.stop(t)
			waitFor(t, waitTimeout, "the new instance's cut-over of every partition", func() bool { return len(cutovers(t, reg)) == parts })
			b2 := start(t, cfg2, nil)
			waitEven(t, brokers, group, 2, each)
			produceSliced(t, brokers, group, input[2*third:])
			lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
			for _, c := range cutovers(t, reg) {
				lo, hi = min(lo, c), max(hi, c)
			}
			need := map[string]bool{}
			for _, v := range want1 {
				if startOf(t, v) < lo {
					need[v] = true
				}
			}
			for _, v := range want2 {
				if startOf(t, v) >= hi {
					need[v] = true
				}
			}
			var got []genResult
			waitForf(t, waitTimeout, time.Second, func() bool {
				got = readGenResults(t, brokers)
				seen := map[string]bool{}
				for _, g := range got {
					if need[g.value] {
						seen[g.value] = true
					}
				}
				return len(seen) == len(need)
			}, func() string {
				seen := map[string]bool{}
				for _, g := range got {
					seen[g.value] = true
				}
				var missing []string
				for v := range need {
					if !seen[v] {
						missing = append(missing, v)
					}
				}
				slices.Sort(missing)
				if len(missing) > 5 {
					missing = missing[:5]
				}
				return fmt.Sprintf("%d windows of the replays in the results topic (cut-overs %d to %d; %d results; missing %d, e.g. %q)", len(need), lo, hi, len(got), len(missing), missing)
			})
			a2.stop(t)
			b2.stop(t)
			dup := map[string]bool{}
			for _, g := range readGenResults(t, brokers) {
				if dup[g.value] {
					t.Errorf("result %s read twice", g.value)
				}
				dup[g.value] = true
				switch {
				case g.version == 1 && (!in1[g.value] || g.start >= hi):
					t.Errorf("generation 1's result %s is not a window of its replay before the cut-overs", g.value)
				case g.version == 2 && (!in2[g.value] || g.start < lo):
					t.Errorf("generation 2's result %s is not a window of its replay after the cut-overs", g.value)
				case g.version != 1 && g.version != 2:
					t.Errorf("result %s has %s %d", g.value, producer.HeaderConfigVersion, g.version)
				}
			}
		})
	}
}

// TestConfigChangeAvroResults: with sink.format avro, a new generation
// with another aggregate registers the results' subject's next schema
// version; the old generation's windows that fire after the cut-over are
// written under the old generation's schema, the new one's under the
// new one, each decoding through the registry to its own aggregates.
func TestConfigChangeAvroResults(t *testing.T) {
	t.Parallel()
	const parts = 4
	input := genInput(parts, 400)
	kc := newCluster(t, parts)
	brokers := kc.ListenAddrs()
	reg := newRegistry(t)
	avro := func(c config.Config) config.Config {
		c.Sink.Format, c.Source.SchemaRegistry.URL = config.FormatAvro, reg.URL()
		return c
	}
	cfg1 := avro(parseConfig(t, genYAML("by_key", "{type: tumbling, size: 5s, allowed_lateness: 2s}", "[{name: calls, fn: count}]", 1), brokers))
	cfg2 := avro(parseConfig(t, genYAML("by_key", "{type: tumbling, size: 1s, allowed_lateness: 2s}", "[{name: calls, fn: count}, {name: longest, fn: max, field: d}]", 2), brokers))
	half := len(input) / 2
	s1 := start(t, cfg1, nil)
	produceSliced(t, brokers, cfg1.Source.Group, input[:half])
	s1.stop(t)
	before := len(readAll(t, brokers, resultsTopic))
	s2 := start(t, cfg2, nil)
	produceSliced(t, brokers, cfg2.Source.Group, input[half:])
	version := func(r *kgo.Record) string {
		for _, h := range r.Headers {
			if h.Key == producer.HeaderConfigVersion {
				return string(h.Value)
			}
		}
		return ""
	}
	waitFor(t, waitTimeout, "results of both generations after the cut-over", func() bool {
		gens := map[string]bool{}
		for _, r := range readAll(t, brokers, resultsTopic)[before:] {
			gens[version(r)] = true
		}
		return gens["1"] && gens["2"]
	})
	s2.stop(t)
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	versions, err := cl.SubjectVersions(context.Background(), resultsTopic+"-value")
	if err != nil || len(versions) != 2 {
		t.Fatalf("subject %s-value versions = %v, %v; want 2", resultsTopic, versions, err)
	}
	for _, r := range readAll(t, brokers, resultsTopic) {
		aggs := decodeAvroResult(t, cl, r.Value)["aggregates"].(map[string]any)
		_, longest := aggs["longest"]
		if v := version(r); longest != (v == "2") || len(aggs) != map[string]int{"1": 1, "2": 2}[v] {
			t.Errorf("a result of generation %s decodes to the aggregates %v", v, aggs)
		}
	}
}
