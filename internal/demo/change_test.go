package demo_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"aggregator/internal/demo"
	"aggregator/internal/metrics"
)

// TestBoardVersions: each result's config version (the header
// aggregator.config_version) goes with its key's row, and the tally
// counts the results of each version.
func TestBoardVersions(t *testing.T) {
	b := demo.NewBoard("res", "late", "dlq")
	for _, f := range []struct {
		value   []byte
		version string
	}{
		{resultJSON(`{"sid":"sid_1"}`, 10_000, 4, "on_time", 0), "1"},
		{resultJSON(`{"sid":"sid_2"}`, 10_000, 2, "on_time", 0), "1"},
		{resultJSON(`{"sid":"sid_1"}`, 15_000, 3, "on_time", 0), "2"},
		{resultJSON(`{"sid":"sid_2"}`, 10_000, 3, "late", 1), "1"},
	} {
		if err := b.ObserveVersion("res", f.value, f.version); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Observe("res", resultJSON(`{"sid":"sid_3"}`, 10_000, 1, "on_time", 0)); err != nil {
		t.Fatal(err)
	}
	got := b.Snapshot()
	if want := map[string]int64{"1": 3, "2": 1, "": 1}; !maps.Equal(got.ByVersion, want) {
		t.Errorf("results by version %v, want %v", got.ByVersion, want)
	}
	versions := map[string]string{}
	for _, r := range got.Rows {
		versions[r.Key] = r.Version
	}
	if want := map[string]string{"sid_1": "2", "sid_2": "1", "sid_3": ""}; !maps.Equal(versions, want) {
		t.Errorf("rows' versions %v, want %v", versions, want)
	}
}

// TestRenderChange: with a config change (demo --change-at) the view says
// what changes, counts the results of each config version, and shows
// each row's version in a column of its own (at 80 columns too, where
// the revision and then aggregates go first); the summary line says the
// same.
func TestRenderChange(t *testing.T) {
	s := sampleState()
	s.Change = "config change at 20s: window.size 5s -> 10s, aggregates + max_duration (state.config_version 1 -> 2)"
	s.ByVersion = map[string]int64{"1": 30, "2": 10}
	s.Rows[0].Version, s.Rows[1].Version = "2", "1"
	got := demo.Render(s)
	for _, want := range []string{s.Change, "results by config version: 1: 30, 2: 10", "config"} {
		if !strings.Contains(got, want) {
			t.Errorf("Render() does not show %q:\n%s", want, got)
		}
	}
	checkGolden(t, "testdata/view_change.golden", got)
	s.Width = 80
	narrow := demo.Render(s)
	header := ""
	for line := range strings.Lines(narrow) {
		if strings.Contains(line, "key") && strings.Contains(line, "window") {
			header = line
		}
	}
	if !strings.Contains(header, "config") && !strings.Contains(header, " v ") {
		t.Errorf("at 80 columns the table has no config version column:\n%s", narrow)
	}
	if sum := demo.Summary(s); !strings.Contains(sum, ` versions=1:30,2:10 change="config change at 20s`) {
		t.Errorf("Summary() = %q, want the results by version and the change", sum)
	}
	s.Change = ""
	if got := demo.Render(s); strings.Contains(got, "config version") || strings.Contains(got, "config ") {
		t.Errorf("without a change the view shows versions:\n%s", got)
	}
}

// TestReadCutovers reads each partition's cut-over from the metrics.
func TestReadCutovers(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	if got, err := demo.ReadCutovers(reg); err != nil || len(got) != 0 {
		t.Errorf("ReadCutovers(none) = %v, %v; want none", got, err)
	}
	m.CutoverTimestamp.WithLabelValues("0").Set(metrics.Seconds(1_922_350_210_000))
	m.CutoverTimestamp.WithLabelValues("2").Set(metrics.Seconds(1_922_350_215_000))
	got, err := demo.ReadCutovers(reg)
	if want := map[int32]int64{0: 1_922_350_210_000, 2: 1_922_350_215_000}; err != nil || !maps.Equal(got, want) {
		t.Errorf("ReadCutovers() = %v, %v; want %v", got, err, want)
	}
}
