package pipeline_test

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"aggregator/internal/ready"
	"aggregator/internal/state"
)

// BenchmarkRestore measures the decode path of a restore, as the shell
// runs it for one partition: its changelog records added to a
// state.Restorer (add-ns/entry), then Processor.Restore, which decodes
// them into the window operator (finish-ns/entry). The changelog holds
// one open window (tumbling) or slice (sliding) per key, count and sum,
// as Checkpoint wrote it. allocs/entry counts both phases' allocations
// (the operator's own memory included: its key strings, chunks, panes);
// restorer-B/entry is what the Restorer holds before Restore.
//
// go test ./internal/pipeline -run X -bench Restore -benchmem
func BenchmarkRestore(b *testing.B) {
	for _, w := range []struct{ name, window string }{
		{"tumbling", "{type: tumbling, size: 1h}"},
		{"sliding", "{type: sliding, size: 1h, slide: 10m}"},
	} {
		for _, keys := range []int{100_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/keys=%d", w.name, keys), func(b *testing.B) { benchRestore(b, w.window, keys) })
		}
	}
}

func benchRestore(b *testing.B, window string, keys int) {
	yaml := `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
window: ` + window + `
aggregates: [{name: n, fn: count}, {name: s, fn: sum, field: v}]
`
	p, _ := newProcessor(b, yaml)
	p.Assign(0, 0)
	if _, err := p.Restore(0, state.NewRestorer(), 0); err != nil {
		b.Fatal(err)
	}
	for k := range keys {
		in := ready.Input{Offset: int64(k), Value: []byte(fmt.Sprintf(`{"k": "key-%07d", "t": %d, "v": %d}`, k, 1_900_000_000_000+k%1000, k%10))}
		p.Process(&in, math.MaxInt64)
	}
	log := changelog{}
	log.commit(p)
	recs := log[0]
	var add, finish time.Duration
	var allocs uint64
	var held int64
	var ms runtime.MemStats
	for b.Loop() {
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		began := time.Now()
		r := state.NewRestorer()
		for _, rec := range recs {
			var tag []byte
			if rec.value == nil {
				tag = state.AppendTag(nil, rec.tag)
			}
			if err := r.Add(rec.key, rec.value, tag); err != nil {
				b.Fatal(err)
			}
		}
		held = r.Bytes()
		added := time.Now()
		q, _ := newProcessor(b, yaml)
		q.Assign(0, 0)
		res, err := q.Restore(0, r, 0)
		if err != nil || res.Entries != keys {
			b.Fatalf("Restore = %d entries, %v; want %d", res.Entries, err, keys)
		}
		finish += time.Since(added)
		add += added.Sub(began)
		runtime.ReadMemStats(&ms)
		allocs += ms.Mallocs - before
	}
	entries := float64(b.N * keys)
	b.ReportMetric(float64(add.Nanoseconds())/entries, "add-ns/entry")
	b.ReportMetric(float64(finish.Nanoseconds())/entries, "finish-ns/entry")
	b.ReportMetric(float64(allocs)/entries, "allocs/entry")
	b.ReportMetric(float64(held)/float64(keys), "restorer-B/entry")
}
