package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"aggregator/internal/config"
)

// BenchmarkReplay is `aggregator replay` end to end on a 1M-record JSON
// file: read, decode, window, encode the output lines.
func BenchmarkReplay(b *testing.B) {
	const records = 1_000_000
	path := filepath.Join(b.TempDir(), "calls.jsonl")
	var buf bytes.Buffer
	base := int64(1922350200000)
	for i := range records {
		// 1000 keys, 10 records per ms, up to 1s out of order.
		ts := base + int64(i/10) - int64(i*7919%1000)
		fmt.Fprintf(&buf, `{"sid":"sid_%d","callType":"success","callTime":%d,"duration":%d,"caller":"+49-30-%08d","region":"eu-central"}`+"\n",
			i%1000, ts, i%600, i)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg := replayConfig(b, "{type: tumbling, size: 1s, allowed_lateness: 1s}", "1s", "{name: calls, fn: count}, {name: total_duration, fn: sum, field: duration}")
	b.SetBytes(int64(buf.Len()))
	replayFile(b, cfg, path, records)
}

// BenchmarkReplayDisordered is `aggregator replay` on 1M JSON records of
// 100 keys, 5,000 per second of event time, moved back in event time by
// 0-1.5s (uniform), or the same with 1% of them 30s back (tail), with a 2s
// out-of-orderness, 1s allowed lateness and count, sum and max: tumbling
// 60s windows against sliding windows of slide 1s and size/slide 2 to
// 240. Compare cpu-ns/record (the process's CPU time per record) within
// one run.
func BenchmarkReplayDisordered(b *testing.B) {
	const records = 1_000_000
	windows := []struct{ name, window string }{
		{"tumbling", "{type: tumbling, size: 60s, allowed_lateness: 1s}"},
	}
	for _, ratio := range []int{2, 10, 60, 240} {
		windows = append(windows, struct{ name, window string }{
			fmt.Sprintf("sliding=%d", ratio), fmt.Sprintf("{type: sliding, size: %ds, slide: 1s, allowed_lateness: 1s}", ratio),
		})
	}
	for _, d := range []struct {
		name      string
		tailShare float64 // of the records, 30s back instead
	}{{"uniform", 0}, {"tail", 0.01}} {
		path := filepath.Join(b.TempDir(), d.name+".jsonl")
		writeDisordered(b, path, records, d.tailShare)
		for _, w := range windows {
			b.Run(d.name+"/"+w.name, func(b *testing.B) {
				replayFile(b, replayConfig(b, w.window, "2s", "{name: calls, fn: count}, {name: total_duration, fn: sum, field: duration}, {name: longest, fn: max, field: duration}"), path, records)
			})
		}
	}
}

// writeDisordered writes records JSON lines of 100 keys, 5 per ms of event
// time, each moved back by 0-1.5s, or by 30s with probability tailShare.
func writeDisordered(b *testing.B, path string, records int, tailShare float64) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	r := rand.New(rand.NewPCG(1, 2))
	base := int64(1922350200000)
	for i := range records {
		back := r.Int64N(1501)
		if r.Float64() < tailShare {
			back = 30_000
		}
		fmt.Fprintf(w, `{"sid":"sid_%d","callType":"success","callTime":%d,"duration":%d,"caller":"+49-30-%08d","region":"eu-central"}`+"\n",
			i%100, base+int64(i/5)-back, i%600, i)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// replayConfig is the calls config with window, the watermark's
// out-of-orderness ooo and aggregates (a YAML flow sequence's items).
func replayConfig(b *testing.B, window, ooo, aggregates string) config.Config {
	cfg, err := config.Parse([]byte(`
source: {format: json, key: [sid], timestamp: {field: callTime, layout: unix_ms}, filter: [{field: callType, equals: success}]}
watermark: {max_out_of_orderness: `+ooo+`}
window: `+window+`
aggregates: [`+aggregates+`]
`), nil)
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// replayFile replays the file at path (of records lines) once per b.Loop
// iteration, and reports records/s and the process's CPU time per record.
func replayFile(b *testing.B, cfg config.Config, path string, records int) {
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriterSize(io.Discard, 1<<16)
		if err := replay(b.Context(), cfg, f, w, false, true, zerolog.Nop()); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	n := float64(records) * float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpuTime()-cpu)/n, "cpu-ns/record")
}

// cpuTime is the process's CPU time so far in ns: on a busy machine it
// swings less than the wall time b.Loop measures.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
