package state_test

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

const benchYAML = `
source: {key: [sid], timestamp: {field: t, layout: unix_ms}}
window: {type: tumbling, size: 1s}
aggregates: [{name: n, fn: count}, {name: total, fn: sum, field: v}]
`

type discard struct{}

func (discard) Emit(*windowing.Result) {}

// pipelineLog is the changelog of keys × windows slices of 1s tumbling
// windows (count and sum), as Processor.Checkpoint writes it: one commit
// per window, its slices then its position. It returns the records and
// their key and value bytes, position records left out.
func pipelineLog(keys, windows int) ([]rec, int) {
	ids := make([]string, keys)
	splits := make([]int, keys)
	for k := range keys {
		ids[k], splits[k] = groupID("sid", fmt.Sprint("sid_", k))
	}
	log := make([]rec, 0, keys*windows+windows)
	size := 0
	for w := range windows {
		tag := uint64(w + 1)
		for k := range keys {
			n := int64(1 + (k+w)%10)
			en := windowing.Entry{Kind: windowing.SliceEntry, ID: ids[k], Split: splits[k],
				Start: 1_700_000_000_000 + int64(w)*1000, Count: n, Nums: []float64{float64(n) * 1.25}}
			r := entryRec(&en, tag)
			size += len(r.key) + len(r.value)
			log = append(log, r)
		}
		log = append(log, posRec(tag, int64((w+1)*keys)))
	}
	return log, size
}

// BenchmarkRestore1M: one op reads a changelog of 1M slices (1k keys ×
// 1000 windows) into a Restorer and restores it into a new Engine
// (ns/state; restorer-B/state: what the Restorer holds before Finish).
func BenchmarkRestore1M(b *testing.B) {
	const keys, windows = 1000, 1000
	cfg, err := config.Parse([]byte(benchYAML), nil)
	if err != nil {
		b.Fatalf("config.Parse = %v", err)
	}
	log, size := pipelineLog(keys, windows)
	b.ReportAllocs()
	var held int64
	for b.Loop() {
		r := state.NewRestorer()
		for _, x := range log {
			if err := r.Add(x.key, x.value, x.tag); err != nil {
				b.Fatalf("Add(%v) = %v", x, err)
			}
		}
		held = r.Bytes()
		e, err := windowing.NewEngine(pipeline.WindowSpec(cfg), discard{})
		if err != nil {
			b.Fatalf("NewEngine = %v", err)
		}
		res, err := r.Finish(func(en *windowing.Entry) error { return e.Restore(en, math.MinInt64) })
		if err != nil || res.Entries != keys*windows || len(res.Repairs) != 0 {
			b.Fatalf("Finish() = {Entries %d, Repairs %d}, %v, want {%d, 0}, nil", res.Entries, len(res.Repairs), err, keys*windows)
		}
		e.FinishRestore()
	}
	b.ReportMetric(float64(size)/(keys*windows), "changelog-B/state")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*keys*windows), "ns/state")
	b.ReportMetric(float64(held)/(keys*windows), "restorer-B/state")
}

// BenchmarkDecode: the Restorer alone, the same changelog of 1M slices
// added and handed over to a func that keeps nothing: add-ns/state and
// finish-ns/state, and allocs/state (the arena's chunks and index, no
// allocation per record or entry).
func BenchmarkDecode(b *testing.B) {
	const keys, windows = 1000, 1000
	log, _ := pipelineLog(keys, windows)
	var add, finish time.Duration
	var allocs uint64
	var ms runtime.MemStats
	for b.Loop() {
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		began := time.Now()
		r := state.NewRestorer()
		for _, x := range log {
			if err := r.Add(x.key, x.value, x.tag); err != nil {
				b.Fatalf("Add(%v) = %v", x, err)
			}
		}
		added := time.Now()
		n := 0
		if _, err := r.Finish(func(*windowing.Entry) error { n++; return nil }); err != nil || n != keys*windows {
			b.Fatalf("Finish() = %d entries, %v", n, err)
		}
		finish += time.Since(added)
		add += added.Sub(began)
		runtime.ReadMemStats(&ms)
		allocs += ms.Mallocs - before
	}
	states := float64(b.N * keys * windows)
	b.ReportMetric(float64(add.Nanoseconds())/states, "add-ns/state")
	b.ReportMetric(float64(finish.Nanoseconds())/states, "finish-ns/state")
	b.ReportMetric(float64(allocs)/states, "allocs/state")
}
