package demo_test

import (
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"aggregator/internal/demo"
	"aggregator/internal/metrics"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s:\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

// sampleState is a frame 12s into a run that started at 10:10:00 UTC.
func sampleState() demo.State {
	now := time.Date(2030, 12, 1, 10, 10, 12, 0, time.UTC)
	return demo.State{
		Now: now, Elapsed: 12*time.Second + 300*time.Millisecond,
		Brokers: "in-process kfake at 127.0.0.1:40123", MetricsURL: "http://localhost:9090/metrics",
		Settings: "tumbling 5s windows · max_out_of_orderness 1s · allowed_lateness 2s",
		Columns:  []string{"calls", "total_duration", "avg_duration", "p99_duration"},
		Sent:     demo.Counts{480, 30, 30, 30, 30}, SentRate: 50, Processed: 598, ProcessedRate: 49.8,
		Watermark: now.Add(-1300 * time.Millisecond).UnixMilli(),
		Tally: demo.Tally{Results: 40, LateFirings: 3, Late: 3, DeadLetters: 6, Rows: []demo.Row{
			{Key: "sid_0", Start: now.Add(-7 * time.Second).UnixMilli(), End: now.Add(-2 * time.Second).UnixMilli(), Count: 9,
				Aggregates: map[string]string{"calls": "9", "total_duration": "2900", "avg_duration": "322.2222222222222", "p99_duration": "590"},
				Firing:     "on_time"},
			{Key: "sid_12", Start: now.Add(-12 * time.Second).UnixMilli(), End: now.Add(-7 * time.Second).UnixMilli(), Count: 11,
				Aggregates: map[string]string{"calls": "11", "total_duration": "3300", "avg_duration": "300", "p99_duration": "598.5"},
				Firing:     "late", Revision: 2},
		}},
	}
}

func TestRenderGolden(t *testing.T) {
	checkGolden(t, "testdata/view.golden", demo.Render(sampleState()))
}

func TestRenderBeforeResults(t *testing.T) {
	s := sampleState()
	s.Rows, s.Watermark = nil, math.MinInt64
	checkGolden(t, "testdata/view_empty.golden", demo.Render(s))
}

func TestSummary(t *testing.T) {
	const where = ` kafka="in-process kfake at 127.0.0.1:40123" metrics=http://localhost:9090/metrics`
	tests := map[string]struct {
		edit func(*demo.State)
		want string
	}{
		"running": {func(*demo.State) {},
			"demo: elapsed=12s produced=600 processed=598 results=40 late_firings=3 retractions=0 late=3 dead_letters=6 keys=2 watermark=2030-12-01T10:10:10.7Z" + where},
		"sessions": {func(s *demo.State) { s.Retractions = 2 },
			"demo: elapsed=12s produced=600 processed=598 results=40 late_firings=3 retractions=2 late=3 dead_letters=6 keys=2 watermark=2030-12-01T10:10:10.7Z" + where},
		"no watermark": {func(s *demo.State) { s.Watermark = math.MinInt64 },
			"demo: elapsed=12s produced=600 processed=598 results=40 late_firings=3 retractions=0 late=3 dead_letters=6 keys=2 watermark=none" + where},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s := sampleState()
			tt.edit(&s)
			if got := demo.Summary(s); got != tt.want {
				t.Errorf("Summary() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReadPipeline(t *testing.T) {
	reg := prometheus.NewRegistry()
	got, err := demo.ReadPipeline(reg)
	if err != nil || got.Processed != 0 || got.Watermark != math.MinInt64 {
		t.Errorf("ReadPipeline(empty) = %+v, %v; want 0 processed, no watermark", got, err)
	}
	m := metrics.New(reg)
	if got, _ := demo.ReadPipeline(reg); got.Watermark != math.MinInt64 {
		t.Errorf("ReadPipeline(gauge at 0) watermark = %d, want none", got.Watermark)
	}
	m.Records.WithLabelValues("calls", "0", "aggregated").Add(5)
	m.Records.WithLabelValues("calls", "1", "late").Add(2)
	m.Watermark.Set(metrics.Seconds(1_922_350_204_999))
	got, err = demo.ReadPipeline(reg)
	if err != nil || got.Processed != 7 || got.Watermark != 1_922_350_204_999 {
		t.Errorf("ReadPipeline() = %+v, %v; want 7 processed, watermark 1922350204999", got, err)
	}
}

func BenchmarkRender(b *testing.B) {
	s := sampleState()
	b.ReportAllocs()
	for b.Loop() {
		demo.Render(s)
	}
}

// manyKeys is sampleState with n keys; key sid_i had the i-th latest result.
func manyKeys(n int) demo.State {
	s := sampleState()
	row := s.Rows[0]
	s.Rows = nil
	for i := range n {
		r := row
		r.Key, r.Seen = fmt.Sprintf("sid_%d", i), int64(i)
		s.Rows = append(s.Rows, r)
	}
	return s
}

func TestRenderFitsTheTerminal(t *testing.T) {
	s := manyKeys(1000)
	s.Lines = 40
	got := demo.Render(s)
	if lines := strings.Count(got, "\n"); lines != s.Lines-1 {
		t.Errorf("Render(1000 keys, 40 lines) has %d lines, want 39 (the cursor's line left free):\n%s", lines, got)
	}
	// 40 lines: 9 above the table, its header, the "+N more" line, the cursor's line: 28 keys.
	if !strings.Contains(got, "\n+972 more keys (showing the 28 with the latest results)\n") {
		t.Errorf("Render(1000 keys, 40 lines) lacks the +972 more line:\n%s", got)
	}
	for _, key := range []string{"sid_999", "sid_972"} {
		if !strings.Contains(got, key+" ") {
			t.Errorf("Render(1000 keys, 40 lines) lacks %s, one of the 28 latest:\n%s", key, got)
		}
	}
	if strings.Contains(got, "sid_971 ") {
		t.Errorf("Render(1000 keys, 40 lines) shows sid_971, not one of the 28 latest:\n%s", got)
	}
	if i, j := strings.Index(got, "sid_972 "), strings.Index(got, "sid_999 "); i > j {
		t.Errorf("Render: rows are not in key order:\n%s", got)
	}
}

func TestRenderEveryKeyThatFits(t *testing.T) {
	tests := map[string]struct{ keys, lines, rows int }{
		"no height known": {50, 0, 50},
		"all fit":         {5, 40, 5},
		"exactly fit":     {28, 40, 28},
		"one too many":    {29, 40, 28},
		"a tiny terminal": {5, 3, 1},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s := manyKeys(tt.keys)
			s.Lines = tt.lines
			got := demo.Render(s)
			if rows := strings.Count(got, "  on_time  "); rows != tt.rows {
				t.Errorf("Render(%d keys, %d lines) shows %d rows, want %d:\n%s", tt.keys, tt.lines, rows, tt.rows, got)
			}
			if more := strings.Contains(got, "more keys"); more != (tt.rows < tt.keys) {
				t.Errorf("Render(%d keys, %d lines): +N more line shown = %v, want %v", tt.keys, tt.lines, more, !more)
			}
		})
	}
}

func TestWatermarkAheadOrBehind(t *testing.T) {
	tests := map[string]struct {
		offset time.Duration // watermark minus now
		want   string
	}{
		"behind": {-1300 * time.Millisecond, "(1.3s behind the wall clock)"},
		"ahead":  {13*time.Minute + 37580*time.Millisecond, "(13m37.58s ahead of the wall clock)"},
		"at":     {0, "(at the wall clock)"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s := sampleState()
			s.Watermark = s.Now.Add(tt.offset).UnixMilli()
			if got := demo.Render(s); !strings.Contains(got, tt.want) {
				t.Errorf("Render(watermark now%+v) lacks %q:\n%s", tt.offset, tt.want, got)
			}
		})
	}
}

// TestRenderFitsTheWidth: at 80×24 and 160×45 no line is wider than the
// terminal, the frame leaves the cursor's line free, and the title, the
// broker address and the window settings stay whole; 80 columns hide
// table columns (and say so), 160 show them all.
func TestRenderFitsTheWidth(t *testing.T) {
	tests := map[string]struct {
		width, lines int
		hidden       bool
	}{
		"80x24":  {80, 24, true},
		"160x45": {160, 45, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s := manyKeys(8)
			s.Settings += " · 8 keys, 50 records/s"
			s.Retractions = 3
			s.Width, s.Lines = tt.width, tt.lines
			got := demo.Render(s)
			if n := strings.Count(got, "\n"); n > tt.lines-1 {
				t.Errorf("Render at %s has %d lines, want at most %d:\n%s", name, n, tt.lines-1, got)
			}
			for line := range strings.Lines(got) {
				if w := utf8.RuneCountInString(strings.TrimSuffix(line, "\n")); w > tt.width {
					t.Errorf("Render at %s: line of %d columns: %q", name, w, line)
				}
			}
			wantWhole := []string{"aggregator demo", "in-process kfake at 127.0.0.1:40123", "http://localhost:9090/metrics",
				"tumbling 5s windows", "max_out_of_orderness 1s", "allowed_lateness 2s"}
			if tt.width >= 80 {
				for _, want := range wantWhole {
					if !strings.Contains(got, want) {
						t.Errorf("Render at %s lacks %q:\n%s", name, want, got)
					}
				}
			}
			if hidden := strings.Contains(got, "columns hidden"); hidden != tt.hidden {
				t.Errorf("Render at %s: columns hidden = %v, want %v:\n%s", name, hidden, tt.hidden, got)
			}
			if !strings.Contains(got, "sid_7 ") {
				t.Errorf("Render at %s shows no row for sid_7:\n%s", name, got)
			}
		})
	}
}

// TestRenderSessionsLabelsTooLate: with sessions, a record generated too
// late for its own window is not promised to be a late event.
func TestRenderSessionsLabelsTooLate(t *testing.T) {
	s := sampleState()
	if got := demo.Render(s); !strings.Contains(got, ", 30 too late, ") {
		t.Errorf("Render(tumbling) lacks \", 30 too late, \":\n%s", got)
	}
	s.Sessions = true
	if got := demo.Render(s); !strings.Contains(got, "30 too late for their own window (late events unless they join an open session)") {
		t.Errorf("Render(sessions) does not say what too late means there:\n%s", got)
	}
}

// TestRenderCalendarDays: with a Zone, the table shows each window as its
// local day and length (31 March 2030 in Berlin is 23 hours), the
// watermark as a local time, and the frame still fits 80x24.
func TestRenderCalendarDays(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	s := sampleState()
	s.Zone, s.Width, s.Lines = berlin, 80, 24
	s.Settings = "days in Europe/Berlin, event clock 1h a second from Sat 30 Mar 2030 21:00 CET · max_out_of_orderness 1s · allowed_lateness 1h · 8 keys, 50 records/s"
	day := func(y int, m time.Month, d int) int64 { return time.Date(y, m, d, 0, 0, 0, 0, berlin).UnixMilli() }
	s.Rows[0].Start, s.Rows[0].End, s.Rows[0].Firing = day(2030, 3, 30), day(2030, 3, 31), "on_time"
	s.Rows[1].Start, s.Rows[1].End, s.Rows[1].Firing = day(2030, 3, 31), day(2030, 4, 1), "early"
	s.Watermark = time.Date(2030, 3, 31, 14, 30, 0, 0, berlin).UnixMilli()
	got := demo.Render(s)
	for _, want := range []string{" day ", "Sat 30 Mar (24h)", "Sun 31 Mar (23h)", "watermark Sun 31 Mar 2030 14:30:00 CEST"} {
		if !strings.Contains(got, want) {
			t.Errorf("Render(calendar days) lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n"); n > s.Lines-1 {
		t.Errorf("Render(calendar days) has %d lines, want at most %d:\n%s", n, s.Lines-1, got)
	}
	for line := range strings.Lines(got) {
		if w := utf8.RuneCountInString(strings.TrimSuffix(line, "\n")); w > s.Width {
			t.Errorf("Render(calendar days): line of %d columns: %q", w, line)
		}
	}
}

// TestRenderInstances: with several instances the view lists the
// partitions each holds ("partition 1", "partitions 0, 2", "no
// partition"), and the check line says whether the results equal those
// of a replay of the input in one process; the summary line carries
// both.
func TestRenderInstances(t *testing.T) {
	s := sampleState()
	s.Instances = []demo.Instance{{Name: "1", Partitions: []int32{0, 2}}, {Name: "2", Partitions: []int32{1}}, {Name: "3"}}
	s.Check = &demo.CheckTally{Compared: 57, Pending: 9}
	checkGolden(t, "testdata/view_instances.golden", demo.Render(s))
	const want = ` instances=3 partitions=1:0,2;2:1;3:none replay_compared=57 replay_differ=0 kafka=`
	if got := demo.Summary(s); !strings.Contains(got, want) {
		t.Errorf("Summary() = %q, want it to hold %q", got, want)
	}
}

// TestResultLine: a result as a line of a stdout that is not a
// terminal: fields as name=value, the aggregates in config order as
// written, a value with a space quoted, the config version with a change.
func TestResultLine(t *testing.T) {
	s := sampleState()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	day := demo.Row{Key: "a=1 b=x", Start: time.Date(2030, 3, 31, 0, 0, 0, 0, berlin).UnixMilli(), End: time.Date(2030, 4, 1, 0, 0, 0, 0, berlin).UnixMilli(),
		Count: 2, Aggregates: map[string]string{"calls": "2"}, Firing: "early", Version: "2"}
	tests := map[string]struct {
		row      demo.Row
		zone     *time.Location
		versions bool
		want     string
	}{
		"tumbling": {s.Rows[0], nil, false,
			"result key=sid_0 window=[10:10:05,10:10:10) count=9 calls=9 total_duration=2900 avg_duration=322.2222222222222 p99_duration=590 firing=on_time revision=0"},
		"calendar day, key of two fields, a version": {day, berlin, true,
			`result key="a=1 b=x" window="Sun 31 Mar (23h)" count=2 calls=2 total_duration=- avg_duration=- p99_duration=- firing=early revision=0 config=2`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := demo.ResultLine(tt.row, s.Columns, tt.zone, tt.versions); got != tt.want {
				t.Errorf("ResultLine() = %s\nwant           %s", got, tt.want)
			}
		})
	}
}

// TestLegend: the first lines of a stdout that is not a terminal say
// where Kafka and the metrics are, the settings, and what each field of
// the lines after means: the instances' partitions with several, the
// comparison with a replay of the input, or why there is none.
func TestLegend(t *testing.T) {
	s := sampleState()
	s.Check = &demo.CheckTally{}
	s.Stage2 = true
	got := demo.Legend(s, 3)
	for _, want := range []string{"aggregator demo · Kafka: in-process kfake at 127.0.0.1:40123 · metrics: http://localhost:9090/metrics\n",
		"tumbling 5s windows · max_out_of_orderness 1s · allowed_lateness 2s · Ctrl-C to stop\n", `lines: "result" for each result`,
		"instances, partitions (of the input topic), repartition (of the repartition topic)", "replay_compared: windows whose last result",
		"waiting_for: "} {
		if !strings.Contains(got, want) {
			t.Errorf("Legend() lacks %q:\n%s", want, got)
		}
	}
	s.Check, s.CheckNote = nil, "none for global windows (they never close)"
	got = demo.Legend(s, 1)
	if strings.Contains(got, "instances,") || strings.Contains(got, "replay_compared") ||
		!strings.Contains(got, "no comparison with a replay of the input: none for global windows (they never close)") {
		t.Errorf("Legend(one instance, no check) = \n%s\nwant no instances' line, and why there is no comparison", got)
	}
}

func TestRenderCheck(t *testing.T) {
	tests := map[string]struct {
		check *demo.CheckTally
		note  string
		want  string
	}{
		"none closed": {&demo.CheckTally{Pending: 4}, "", "results equal a replay of the input: none closed yet (4 windows open)\n"},
		"equal":       {&demo.CheckTally{Compared: 8, Pending: 4}, "", "results equal a replay of the input: yes (8 windows compared, 4 open)\n"},
		"differ": {&demo.CheckTally{Compared: 8, Differ: 1, FirstDiff: "k: service count 1, reference count 2"}, "",
			"results equal a replay of the input: NO, 1 of 8 windows differ; first: k: service count 1, reference count 2\n"},
		"not checked": {nil, "not for global windows", "replay check: not for global windows\n"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s := sampleState()
			s.Check, s.CheckNote = tt.check, tt.note
			if got := demo.Render(s); !strings.Contains(got, "\n"+tt.want) {
				t.Errorf("Render() lacks %q:\n%s", tt.want, got)
			}
		})
	}
}

func TestReadInstances(t *testing.T) {
	reg := prometheus.NewRegistry()
	for name, parts := range map[string][]string{"1": {"2", "0"}, "2": {"1"}, "10": nil} {
		m := metrics.New(prometheus.WrapRegistererWith(prometheus.Labels{demo.InstanceLabel: name}, reg))
		for _, p := range parts {
			m.PartitionWatermark.WithLabelValues("calls", p).Set(1)
		}
		if len(parts) > 0 {
			m.Watermark.Set(1)
			m.Ready.Set(1)
		}
		m.PartitionWatermark.WithLabelValues("calls-repartition", "7").Set(1)
		m.PartitionWatermark.WithLabelValues("other", "8").Set(1)
	}
	got, err := demo.ReadInstances(reg, "calls", "")
	if err != nil {
		t.Fatal(err)
	}
	const want = "[{1 true [0 2] [] [] 0 1000} {2 true [1] [] [] 0 1000} {10 false [] [] [] 0 -9223372036854775808}]"
	if s := fmt.Sprint(got); s != want {
		t.Errorf("ReadInstances(by key) = %s, want %s: partitions and watermarks", s, want)
	}
}

// TestReadInstancesStage2: with the repartition stage an instance holds
// partitions of either topic or both; a held input partition without a
// watermark is silent, and the sources its stage 2 has not heard from
// are counted.
func TestReadInstancesStage2(t *testing.T) {
	reg := prometheus.NewRegistry()
	one := metrics.New(prometheus.WrapRegistererWith(prometheus.Labels{demo.InstanceLabel: "1"}, reg))
	one.PartitionWatermark.WithLabelValues("calls-repartition", "2").Set(1)
	one.PartitionWatermark.WithLabelValues("calls-repartition", "1").Set(1)
	one.Watermark.Set(1)
	two := metrics.New(prometheus.WrapRegistererWith(prometheus.Labels{demo.InstanceLabel: "2"}, reg))
	two.PartitionWatermark.WithLabelValues("calls", "0").Set(math.Inf(-1))
	two.PartitionWatermark.WithLabelValues("calls", "1").Set(2)
	two.PartitionWatermark.WithLabelValues("calls-repartition", "0").Set(1)
	two.SourcesUnreported.Set(3)
	two.Watermark.Set(math.Inf(-1))
	got, err := demo.ReadInstances(reg, "calls", "calls-repartition")
	if err != nil {
		t.Fatal(err)
	}
	const want = "[{1 false [] [1 2] [] 0 1000} {2 false [0 1] [0] [0] 3 -9223372036854775808}]"
	if s := fmt.Sprint(got); s != want {
		t.Errorf("ReadInstances(repartition) = %s, want %s", s, want)
	}
}

// TestUnsettled: the generator starts once every instance is ready and
// holds a partition of either stage, none held twice. An instance that
// holds only repartition partitions is settled: the group's balancer
// shares out both topics' partitions together, and the demo once waited
// for ever for such an instance to hold an input partition.
func TestUnsettled(t *testing.T) {
	tests := map[string]struct {
		ins  []demo.Instance
		want string
	}{
		"by key, spread": {[]demo.Instance{{Name: "1", Ready: true, Partitions: []int32{0, 2}}, {Name: "2", Ready: true, Partitions: []int32{1}}}, ""},
		"stage 2 only": {[]demo.Instance{
			{Name: "1", Ready: true, Stage2: []int32{1, 2}},
			{Name: "2", Ready: true, Partitions: []int32{0}, Stage2: []int32{0}},
			{Name: "3", Ready: true, Partitions: []int32{1, 2}}}, ""},
		"not ready":    {[]demo.Instance{{Name: "1", Partitions: []int32{0}}, {Name: "2", Ready: true, Partitions: []int32{1}}}, "#1 is not ready"},
		"holding none": {[]demo.Instance{{Name: "1", Ready: true, Partitions: []int32{0, 1}}, {Name: "2", Ready: true}}, "#2 holds no partition"},
		"held twice": {[]demo.Instance{{Name: "1", Ready: true, Partitions: []int32{0}, Stage2: []int32{1}}, {Name: "2", Ready: true, Stage2: []int32{1}}},
			"repartition partition 1 is held by #1 and #2"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := demo.Unsettled(tt.ins); got != tt.want {
				t.Errorf("Unsettled(%v) = %q, want %q", tt.ins, got, tt.want)
			}
		})
	}
}

// TestWaiting: the view says which instances have no watermark and what
// each waits for; an instance with only input partitions of a
// repartitioned stream has no windows and needs none.
func TestWaiting(t *testing.T) {
	none := int64(math.MinInt64)
	tests := map[string]struct {
		ins    []demo.Instance
		stage2 bool
		want   string
	}{
		"all have one": {[]demo.Instance{{Name: "1", Watermark: 5}, {Name: "2", Watermark: 7}}, false, ""},
		"by key, silent": {[]demo.Instance{{Name: "1", Watermark: 5}, {Name: "2", Partitions: []int32{1, 2}, Silent: []int32{1, 2}, Watermark: none}}, false,
			"#2 for a first record on partitions 1,2"},
		"by key, holding none": {[]demo.Instance{{Name: "1", Watermark: none}}, false, "#1 for a partition"},
		"stage 1 only": {[]demo.Instance{{Name: "1", Partitions: []int32{0, 1}, Unreported: 3, Watermark: none},
			{Name: "2", Stage2: []int32{0, 1}, Watermark: 9}}, true, ""},
		"unreported sources": {[]demo.Instance{{Name: "1", Stage2: []int32{0}, Unreported: 1, Watermark: none},
			{Name: "2", Stage2: []int32{1}, Unreported: 3, Watermark: none}}, true,
			"#1 for markers from 1 source partition, #2 for markers from 3 source partitions"},
		"stage 2, reported": {[]demo.Instance{{Name: "1", Stage2: []int32{0}, Watermark: none}}, true, "#1 for a watermark from its repartition partitions"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := demo.Waiting(tt.ins, tt.stage2); got != tt.want {
				t.Errorf("Waiting(%v, %v) = %q, want %q", tt.ins, tt.stage2, got, tt.want)
			}
		})
	}
}

// TestRenderWaiting: a frame of a demo held up says what it waits for,
// with the repartition stage each instance's partitions of both topics;
// the summary line carries both.
func TestRenderWaiting(t *testing.T) {
	s := sampleState()
	s.Rows, s.Results, s.LateFirings, s.Late, s.DeadLetters = nil, 0, 0, 0, 0
	s.Sent, s.Processed, s.SentRate, s.ProcessedRate, s.Watermark = demo.Counts{}, 0, 0, 0, math.MinInt64
	s.Stage2 = true
	s.Instances = []demo.Instance{{Name: "1", Stage2: []int32{1, 2}}, {Name: "2", Partitions: []int32{0}, Stage2: []int32{0}},
		{Name: "3", Partitions: []int32{1, 2}}}
	s.Waiting = "watermarks: #1 for markers from 3 source partitions"
	s.Width = 80
	got := demo.Render(s)
	checkGolden(t, "testdata/view_waiting.golden", got)
	for line := range strings.Lines(got) {
		if w := utf8.RuneCountInString(strings.TrimSuffix(line, "\n")); w > s.Width {
			t.Errorf("Render(waiting): line of %d columns: %q", w, line)
		}
	}
	const want = ` instances=3 partitions=1:none;2:0;3:1,2 repartition=1:1,2;2:0;3:none waiting_for="watermarks: #1 for markers from 3 source partitions" kafka=`
	if got := demo.Summary(s); !strings.Contains(got, want) {
		t.Errorf("Summary() = %q, want it to hold %q", got, want)
	}
}

// TestRenderAt80Columns: at 80 columns, as docs/commands.md says, the
// lines above the table wrap (between parts, and between words of a part
// wider than the line) and nothing is cut; sessions show their bounds to
// the millisecond (a session of one record is 1 ms long, never
// "[05:32:44, 05:32:44)"); count and global windows say why nothing of
// theirs is late; one result, late firing, late event and dead letter
// are singular.
func TestRenderAt80Columns(t *testing.T) {
	now := time.Date(2030, 12, 1, 10, 10, 12, 0, time.UTC)
	base := func() demo.State {
		s := sampleState()
		s.Width, s.Lines = 80, 24
		s.Results, s.LateFirings, s.Late, s.DeadLetters = 1, 1, 1, 1
		return s
	}
	sessions := base()
	sessions.Sessions = true
	sessions.Settings = "sessions, 500ms gap · max_out_of_orderness 1s · allowed_lateness 2s"
	sessions.Rows = []demo.Row{
		{Key: "sid_3", Start: now.Add(-7*time.Second + 44*time.Millisecond).UnixMilli(), End: now.Add(-7*time.Second + 45*time.Millisecond).UnixMilli(),
			Count: 1, Aggregates: map[string]string{"calls": "1", "total_duration": "591", "avg_duration": "591", "p99_duration": "591"}, Firing: "on_time"},
		{Key: "sid_4", Start: now.Add(-6 * time.Second).UnixMilli(), End: now.Add(-5*time.Second + 250*time.Millisecond).UnixMilli(),
			Count: 2, Aggregates: map[string]string{"calls": "2", "total_duration": "1192", "avg_duration": "596", "p99_duration": "596.04"}, Firing: "on_time"},
	}
	count := base()
	count.NothingLate = "nothing is late in count windows"
	count.Settings = "count windows of 10 records, timeout 5s · max_out_of_orderness 1s · allowed_lateness 0s"
	for name, s := range map[string]demo.State{"sessions": sessions, "count": count} {
		t.Run(name, func(t *testing.T) {
			got := demo.Render(s)
			checkGolden(t, "testdata/view_80_"+name+".golden", got)
			for line := range strings.Lines(got) {
				if w := utf8.RuneCountInString(strings.TrimSuffix(line, "\n")); w > s.Width {
					t.Errorf("Render(%s): line of %d columns: %q", name, w, line)
				}
			}
			if strings.Contains(got, "…") {
				t.Errorf("Render(%s) cut a line:\n%s", name, got)
			}
			if !strings.Contains(got, "1 result (1 late firing) · 1 late event · 1 dead letter") {
				t.Errorf("Render(%s) lacks the singular output line:\n%s", name, got)
			}
		})
	}
}
