package integration

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkPeers measures what a user runs: `aggregator run` (the binary,
// a process of its own) with the default config, whose key is a record
// field (source.partitioning auto: the repartition stage), and with
// source.partitioning by_key, against a plain franz-go group consumer
// (this process) that reads the same topic and touches every value. The
// broker is `aggregator broker`, in its own process, so that each
// reader's CPU is its process's alone. The input is the end-to-end
// benchmark's (400,000 records, 1000 keys in 4 partitions by key, 2.5
// records per key per 5 s tumbling window: a result every 2.5 input
// records), and one 40 times denser (100 per key per window). Each iteration runs the three readers one after the other,
// so that the machine's load drifts alike for them; the ratios are of
// their CPU per input record (the targets: default ≤ 1.6× by_key in both
// delivery modes). A service's CPU is counted from its first input record
// (once /metrics counts one) until every record has an outcome and every
// result is acknowledged: start-up and shutdown are left out.
func BenchmarkPeers(b *testing.B) {
	for _, in := range []struct {
		name      string
		perWindow int // records per key per 5s window
	}{{"2.5-per-window", 0}, {"100-per-window", 100}} {
		for _, delivery := range []string{"at_least_once", "exactly_once"} {
			b.Run(in.name+"/"+delivery, func(b *testing.B) { benchPeers(b, delivery, in.perWindow) })
		}
	}
}

func benchPeers(b *testing.B, delivery string, perWindow int) {
	brokers := brokerProcess(b, 4, inTopic, resultsTopic, lateTopic, dlqTopic)
	if perWindow == 0 {
		produceBenchInput(b, brokers, 1000)
	} else {
		produceDenseInput(b, brokers, 1000, perWindow)
	}
	var plain, byKey, auto timing
	for b.Loop() {
		plain.add(plainTime(b, brokers, benchGroup("plain")))
		byKey.add(binaryTime(b, brokers, delivery, "by_key"))
		auto.add(binaryTime(b, brokers, delivery, ""))
	}
	b.ReportMetric(plain.cpuPerRecord(), "plain-cpu-ns/record")
	b.ReportMetric(byKey.cpuPerRecord(), "by_key-cpu-ns/record")
	b.ReportMetric(auto.cpuPerRecord(), "default-cpu-ns/record")
	b.ReportMetric(auto.cpuPerRecord()/byKey.cpuPerRecord(), "default/by_key")
	b.ReportMetric(byKey.cpuPerRecord()/plain.cpuPerRecord(), "by_key/plain")
	b.ReportMetric(float64(auto.records)/auto.wall.Seconds(), "default-records/s")
}

// binaryTime runs `aggregator run` over the whole topic in a new group,
// with partitioning ("" for the default), and times it.
func binaryTime(b *testing.B, brokers []string, delivery, partitioning string) timing {
	b.Helper()
	group := benchGroup("bin-" + partitioning + "-" + delivery)
	yaml := callsConfig(tumbling)
	if partitioning == "" {
		yaml = strings.Replace(yaml, "  partitioning: by_key\n", "", 1)
	} else {
		yaml = strings.Replace(yaml, "partitioning: by_key", "partitioning: "+partitioning, 1)
	}
	yaml = strings.Replace(yaml, "source:\n", fmt.Sprintf("source:\n  brokers: [%q]\n  topics: [%s]\n  group: %s\n", brokers[0], inTopic, group), 1)
	yaml += fmt.Sprintf("delivery: %s\nsink: {results_topic: %s, late_topic: %s, dead_letter_topic: %s}\nshutdown_timeout: 10s\n",
		delivery, resultsTopic, lateTopic, dlqTopic)
	path := fmt.Sprintf("%s/%s.yaml", b.TempDir(), group)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		b.Fatal(err)
	}
	run := startBinary(b, path)
	var start time.Time
	var startCPU time.Duration
	waitForf(b, waitTimeout, 5*time.Millisecond, func() bool {
		m := scrape(run.probes)
		if start.IsZero() && metricSum(m, "aggregator_records_total", "") > 0 {
			start, startCPU = time.Now(), processCPU(b, run.cmd.Process.Pid)
		}
		return metricSum(m, "aggregator_records_total", "") >= benchRecords &&
			metricSum(m, "aggregator_produced_records_total", `topic="`+resultsTopic+`"`) >= metricSum(m, "aggregator_firings_total", "")
	}, func() string {
		return "every record with an outcome and every result acknowledged\n" + run.out.String()
	})
	t := timing{wall: time.Since(start), cpu: processCPU(b, run.cmd.Process.Pid) - startCPU, records: benchRecords}
	_ = run.cmd.Process.Signal(os.Interrupt)
	if code, _ := run.wait(b, 30*time.Second); code != 0 {
		b.Fatalf("aggregator run exited %d\n%s", code, run.out)
	}
	return t
}

// scrape returns the text of probes' /metrics ("" if it does not answer).
func scrape(probes string) string {
	resp, err := http.Get(probes + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return ""
	}
	return string(body)
}

// metricSum is the sum of the series of metric name in text whose labels
// contain label ("" all).
func metricSum(text, name, label string) float64 {
	total := 0.0
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") || !strings.Contains(line, label) {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' ')+1:]), 64); err == nil {
			total += v
		}
	}
	return total
}

// processCPU is the CPU time of process pid so far (threadsCPU), or fails t.
func processCPU(t testing.TB, pid int) time.Duration {
	cpu, err := threadsCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	return cpu
}

// threadsCPU is the CPU time of process pid so far: the sum over its
// threads of their time on a CPU, from /proc (in ns; the process's
// utime and stime are in ticks of 10 ms, too coarse for a run of 0.2 s).
// A thread that ended is no longer counted; a Go program's threads live
// as long as it does.
func threadsCPU(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, t := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread ended meanwhile
		}
		fields := strings.Fields(string(stat))
		ns, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/task/%s/schedstat: %q", pid, t.Name(), stat)
		}
		total += time.Duration(ns)
	}
	return total, nil
}
