package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

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
	cfg, err := config.Parse([]byte(`
source: {format: json, key: [sid], timestamp: {field: callTime, layout: unix_ms}, filter: [{field: callType, equals: success}]}
watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 1s, allowed_lateness: 1s}
aggregates: [{name: calls, fn: count}, {name: total_duration, fn: sum, field: duration}]
`), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriterSize(io.Discard, 1<<16)
		if err := replay(cfg, f, w, false, true); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
