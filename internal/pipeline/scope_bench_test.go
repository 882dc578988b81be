package pipeline_test

import (
	"fmt"
	"math"
	"strconv"
	"syscall"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
)

// BenchmarkScope: 64 partitions, 1,000 keys (each on one partition), 5 s
// tumbling windows, records in event-time order round the partitions (one a ms: 5 per key
// and window),
// their outputs taken after each record as replay does and a commit's
// changelog every 1,000 records: one operator for all partitions (scope
// global) against one per partition (scope partition), CPU per record.
// The stream goes on from op to op (each record is made as it is fed,
// alike in both).
func BenchmarkScope(b *testing.B) {
	const parts, keys, perOp = 64, 1000, 10_000
	for _, scope := range []string{"global", "partition"} {
		b.Run(scope, func(b *testing.B) {
			cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {key: [k], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
watermark: {max_out_of_orderness: 1s, scope: %s}
window: {type: tumbling, size: 5s}
aggregates: [{name: n, fn: count}, {name: s, fn: sum, field: v}]
`, scope)), nil)
			if err != nil {
				b.Fatal(err)
			}
			p, err := pipeline.New(cfg, pipeline.Mode{Checkpointed: true})
			if err != nil {
				b.Fatal(err)
			}
			for id := range int32(parts) {
				p.Assign(id, 0)
			}
			var buf []byte
			var in ready.Input
			fired := 0
			b.ReportAllocs()
			i := 0
			cpu := cpuTime()
			for b.Loop() {
				for range perOp {
					k := i % keys
					buf = append(buf[:0], `{"k": "key-`...)
					buf = strconv.AppendInt(buf, int64(k), 10)
					buf = append(buf, `", "t": `...)
					buf = strconv.AppendInt(buf, 1_000_000+int64(i), 10)
					buf = append(buf, `, "v": `...)
					buf = strconv.AppendInt(buf, int64(i%7), 10)
					buf = append(buf, '}')
					in = ready.Input{Partition: int32(k % parts), Offset: int64(i / parts), Value: buf}
					p.Process(&in, math.MaxInt64)
					fired += len(p.Step().Outputs)
					if i%1000 == 999 {
						p.Commit()
						p.Accept()
					}
					i++
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perOp), "ns/record")
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N*perOp), "cpu-ns/record")
			b.ReportMetric(float64(fired)/float64(b.N*perOp), "results/record")
		})
	}
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
