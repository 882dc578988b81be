package integration

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"aggregator/internal/config"
)

// ordered returns n JSON records of 8 keys, 100ms apart starting at from,
// each key pinned to partition key%4; within each partition the times
// only go up, so what closes does not depend on how partitions interleave.
func ordered(n int, from int64) (lines []string, parts []int32) {
	for i := range n {
		key := i % 8
		lines = append(lines, fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d}`, key, from+int64(i)*100, i%10))
		parts = append(parts, int32(key%4))
	}
	return lines, parts
}

func byPartition(lines []string, parts []int32) []input {
	var out []input
	for p := range int32(4) {
		var off int64
		for i, l := range lines {
			if parts[i] == p {
				out = append(out, input{p, off, l})
				off++
			}
		}
	}
	return out
}

var watermarkField = regexp.MustCompile(`,"watermark":-?[0-9]+`)

// contents drops the firing watermark, which depends on how partitions
// interleave, and sorts.
func contents(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = watermarkField.ReplaceAllString(v, "")
	}
	slices.Sort(out)
	return out
}

const base = 1_900_000_000_000

// Records spread over 4 partitions by key give the windows replay gives
// for the same records.
func TestFourPartitionsMatchReplay(t *testing.T) {
	kc := newCluster(t, 4)
	brokers := kc.ListenAddrs()
	cfg := parseConfig(t, callsConfig(tumbling), brokers)
	lines, parts := ordered(2000, base)
	want := replay(t, cfg, byPartition(lines, parts), noWallClock)
	produce(t, brokers, lines, func(i int) int32 { return parts[i] })
	s := start(t, cfg, nil)
	waitCount(t, brokers, resultsTopic, int64(len(want.results)))
	s.stop(t)
	if got := contents(values(readAll(t, brokers, resultsTopic))); !slices.Equal(got, contents(want.results)) {
		t.Errorf("results differ from replay:\n%s", diff(got, contents(want.results)))
	}
}

// With idle_timeout, a partition that went silent stops holding the
// watermark back; with idle_advance, the last window closes once traffic
// stops everywhere.
func TestIdlePartitions(t *testing.T) {
	kc := newCluster(t, 4)
	brokers := kc.ListenAddrs()
	cfg := parseConfig(t, strings.Replace(callsConfig(tumbling), "max_out_of_orderness: 1s",
		"max_out_of_orderness: 1s\n  idle_timeout: 1s\n  idle_advance: true", 1), brokers)
	lines, parts := ordered(800, base)
	var quiet []string // partition 3 stops after the first 10s
	var quietParts []int32
	for i, l := range lines {
		if parts[i] != 3 || i < 400 {
			quiet, quietParts = append(quiet, l), append(quietParts, parts[i])
		}
	}
	next := int64(base + 100_000) // after the silence, partitions 0–2 go on at one time
	more := []string{
		`{"sid":"sid_0","t":` + fmt.Sprint(next) + `,"d":1}`,
		`{"sid":"sid_1","t":` + fmt.Sprint(next) + `,"d":1}`,
		`{"sid":"sid_2","t":` + fmt.Sprint(next) + `,"d":1}`,
	}
	all := append(slices.Clone(quiet), more...)
	allParts := append(slices.Clone(quietParts), 0, 1, 2)
	everything := flushed(t, cfg, byPartition(all, allParts))
	closedBy := func(w int64) []string { // on-time results of windows with maxTimestamp <= w
		var out []string
		for _, v := range everything {
			var r struct {
				End int64 `json:"window_end"`
			}
			_ = jsonUnmarshal([]byte(v), &r)
			if r.End-1 <= w {
				out = append(out, v)
			}
		}
		return out
	}

	clock := &fakeClock{t: time.UnixMilli(base)}
	reg := prometheus.NewRegistry()
	produce(t, brokers, quiet, func(i int) int32 { return quietParts[i] })
	s := startWith(t, cfg, clock.Now, reg)
	quietLast := int64(base + 399*100)
	waitCount(t, brokers, resultsTopic, int64(len(closedBy(quietLast-1001))))

	clock.Set(time.UnixMilli(base + 2000)) // every partition caught up and quiet for 2s
	waitGauge(t, reg, "aggregator_idle_partitions", 4)
	produce(t, brokers, more, func(i int) int32 { return int32(i) })
	stepA := closedBy(next - 1001)
	waitCount(t, brokers, resultsTopic, int64(len(stepA)))

	clock.Set(time.UnixMilli(next + 10_000)) // traffic stopped: idle_advance
	waitCount(t, brokers, resultsTopic, int64(len(everything)))
	s.stop(t)
	got := values(readAll(t, brokers, resultsTopic))
	if !slices.Equal(contents(got[:len(stepA)]), contents(stepA)) {
		t.Errorf("with partition 3 idle, results =\n%s", diff(contents(got[:len(stepA)]), contents(stepA)))
	}
	if !slices.Equal(contents(got), contents(everything)) {
		t.Errorf("after idle_advance, results =\n%s", diff(contents(got), contents(everything)))
	}
}

// flushed is replay with the end-of-input flush: every window closes.
func flushed(t testing.TB, cfg config.Config, inputs []input) []string {
	t.Helper()
	return run(t, cfg, inputs, noWallClock, true).results
}

func waitGauge(t testing.TB, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	waitFor(t, waitTimeout, fmt.Sprintf("%s at %v", name, want), func() bool {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.GetMetric()) > 0 && mf.GetMetric()[0].GetGauge().GetValue() == want {
				return true
			}
		}
		return false
	})
}
