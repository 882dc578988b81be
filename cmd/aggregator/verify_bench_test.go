package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/recompute"
	"aggregator/internal/windowing"
)

const verifyBenchYaml = `
source:
  topics: [calls]
  group: bench
  format: json
  key: [sid]
  partitioning: by_key
  timestamp: {field: t, layout: unix_ms}
watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 1s, allowed_lateness: 1s}
aggregates: [{name: calls, fn: count}, {name: total, fn: sum, field: d}]
sink: {results_topic: calls-windows, late_topic: calls-late, dead_letter_topic: calls-dlq}
`

// BenchmarkVerify is `aggregator verify` over 1M input records in 4
// partitions of an in-process kfake (1000 keys, 10 records per ms of event
// time, up to 1 s out of order; 100k results) against `replay --kcat` of a
// dump of the same records, and verify over a tenth of them (--from/--to).
// Besides records/s and cpu-ns/record it reports the peak live heap (as
// of each GC) above the live heap before the run, sampled every 10 ms:
// kfake's copy of the topics is in neither, the fetches it answers are. Run with -benchtime 1x:
//
//	go test ./cmd/aggregator -run X -bench Verify -benchtime 1x
func BenchmarkVerify(b *testing.B) {
	const records, parts = 1_000_000, 4
	const base = int64(1922350200000)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "calls"),
		kfake.SeedTopics(1, "calls-windows", "calls-late", "calls-dlq"))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	dir := b.TempDir()
	path := filepath.Join(dir, "verify.yaml")
	if err := os.WriteFile(path, []byte(verifyBenchYaml), 0o644); err != nil {
		b.Fatal(err)
	}
	env := []string{"AGGREGATOR_SOURCE_BROKERS=" + strings.Join(kc.ListenAddrs(), ",")}
	cfg, err := config.Load(path, lookupEnv(env))
	if err != nil {
		b.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	dump, err := os.Create(filepath.Join(dir, "calls.kcat.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	dw := bufio.NewWriter(dump)
	ctx := context.Background()
	var inputs []ready.Input
	offsets := make([]int64, parts)
	var wg sync.WaitGroup
	var produceErr error
	var mu sync.Mutex
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			produceErr = err
			mu.Unlock()
		}
		wg.Done()
	}
	for i := range records {
		key := i % 1000
		p := int32(key % parts)
		ts := base + int64(i/10) - int64(i*7919%1000)
		v := fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d}`, key, ts, i%600)
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Topic: "calls", Partition: p, Value: []byte(v), Timestamp: time.UnixMilli(ts)}, promise)
		line, _ := json.Marshal(kcatLine{Topic: "calls", Partition: p, Offset: offsets[p], Timestamp: ts, Payload: &v})
		dw.Write(append(line, '\n'))
		inputs = append(inputs, ready.Input{Topic: "calls", Partition: p, KafkaPartition: p, Offset: offsets[p], Value: []byte(v), Timestamp: ts})
		offsets[p]++
	}
	wg.Wait()
	if err := errors.Join(produceErr, dw.Flush(), dump.Close()); err != nil {
		b.Fatal(err)
	}
	// The outputs a healthy service wrote: what the engine computes from
	// the input in offset order per partition, the partitions interleaved.
	writeBenchOutputs(b, cl, cfg, inputs, parts)
	inputs = nil

	b.Run("verify", func(b *testing.B) {
		benchPeak(b, records, func() error {
			return run(ctx, []string{"verify", "--config", path}, env, nil, io.Discard, io.Discard)
		})
	})
	b.Run("verify_tenth", func(b *testing.B) {
		at := func(ms int64) string { return time.UnixMilli(base + ms).UTC().Format(time.RFC3339Nano) }
		benchPeak(b, records/10, func() error {
			return run(ctx, []string{"verify", "--config", path, "--from", at(40_000), "--to", at(50_000)}, env, nil, io.Discard, io.Discard)
		})
	})
	b.Run("replay_kcat", func(b *testing.B) {
		benchPeak(b, records, func() error {
			f, err := os.Open(dump.Name())
			if err != nil {
				return err
			}
			defer f.Close()
			return replay(ctx, cfg, f, bufio.NewWriterSize(io.Discard, 1<<16), true, false, zerolog.Nop())
		})
	})
}

// writeBenchOutputs produces the results, late events and dead letters of
// the inputs, recomputed with them interleaved 1000 at a time.
func writeBenchOutputs(b *testing.B, cl *kgo.Client, cfg config.Config, inputs []ready.Input, parts int32) {
	ps := make([]int32, parts)
	for i := range ps {
		ps[i] = int32(i)
	}
	eng, err := recompute.New(cfg, nil, ps)
	if err != nil {
		b.Fatal(err)
	}
	enc := producer.EncoderFor(cfg)
	var recs []*kgo.Record
	write := func(rd *ready.Ready) {
		for i := range rd.Outputs {
			out := &rd.Outputs[i]
			switch out.Kind {
			case ready.Result:
				if out.Result.Firing == windowing.Retract {
					continue
				}
				recs = append(recs, &kgo.Record{Topic: "calls-windows", Key: enc.AppendKey(nil, &out.Result), Value: enc.AppendResult(nil, &out.Result)})
			case ready.Late:
				e := out.Event
				recs = append(recs, &kgo.Record{Topic: "calls-late", Value: e.In.Value, Headers: producer.LateHeaders(&e.In, e.EventTime, e.Watermark, e.Missed)})
			case ready.DeadLetter:
				e := out.Event
				recs = append(recs, &kgo.Record{Topic: "calls-dlq", Value: e.In.Value, Headers: producer.DeadLetterHeaders(&e.In, e.Err)})
			}
		}
	}
	for i := range inputs {
		rd, err := eng.Process(context.Background(), &inputs[i])
		if err != nil {
			b.Fatal(err)
		}
		write(&rd)
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
}

// benchPeak runs fn once per iteration and reports records/s, the
// process's CPU per record and the peak heap above the heap before.
func benchPeak(b *testing.B, records int, fn func() error) {
	cpu := cpuTime()
	var peak uint64
	for b.Loop() {
		runtime.GC()
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(sample)
		before := sample[0].Value.Uint64()
		done := make(chan struct{})
		var wg sync.WaitGroup
		var high uint64
		wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
			for {
				metrics.Read(sample)
				high = max(high, sample[0].Value.Uint64())
				select {
				case <-done:
					return
				case <-tick.C:
				}
			}
		})
		err := fn()
		close(done)
		wg.Wait()
		if err != nil {
			b.Fatal(err)
		}
		if high > before {
			peak = max(peak, high-before)
		}
	}
	n := float64(records) * float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpuTime()-cpu)/n, "cpu-ns/record")
	b.ReportMetric(math.Round(float64(peak)/(1<<20)), "peak-live-heap-MB")
}
