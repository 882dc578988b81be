package integration

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"aggregator/internal/config"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/recompute"
	"aggregator/internal/registry"
)

// pairRef is replay --kcat of one generation's config over the stream:
// what it emits (JSON results), and its watermark after each phase.
type pairRef struct {
	exp        expected
	watermarks []int64
}

// pairReference replays cfg over the stream as replay --kcat does
// (recompute: every partition assigned from the start; one state per
// group key, or with watermark.scope partition one per partition), phase
// after phase, each phase partition after partition (within a phase, no
// record's fate depends on the interleaving: see pairStream).
func pairReference(t testing.TB, r *pairRun, cfg config.Config) pairRef {
	return pairReferenceOf(t, r, cfg, nil, r.c.early == "processing" && cfg.Window.Kind() == config.Global)
}

// pairReferenceOf is pairReference of the records keep keeps (nil: all;
// the others still take their offsets), with the end of input (flush)
// if set: replay fires what is open, and global windows once more.
func pairReferenceOf(t testing.TB, r *pairRun, cfg config.Config, keep func(pairRecord) bool, flush bool) pairRef {
	t.Helper()
	var reg *registry.Client
	if cfg.RecordSpec().Format.Registry() {
		var err error
		if reg, err = registry.New(cfg.Source.SchemaRegistry, zerolog.Nop(), prometheus.NewRegistry()); err != nil {
			t.Fatal(err)
		}
	}
	jsonCfg := cfg
	jsonCfg.Sink.Format = "json"
	eng, err := recompute.New(jsonCfg, reg, []int32{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	var ref pairRef
	out := capture{producer.EncoderFor(jsonCfg), &ref.exp}
	offsets := map[int32]int64{}
	for _, ph := range r.stream.phases {
		for p := range int32(pairParts) {
			for _, rec := range ph {
				if rec.partition != p {
					continue
				}
				off := offsets[p]
				offsets[p]++
				if keep != nil && !keep(rec) {
					continue
				}
				rd, err := eng.Process(context.Background(), &ready.Input{Topic: inTopic, Partition: p, KafkaPartition: p, Offset: off,
					Key: []byte(rec.key), Value: rec.value, Timestamp: pairKafkaTimestamp})
				if err != nil {
					t.Fatal(err)
				}
				out.write(rd)
			}
		}
		ref.watermarks = append(ref.watermarks, eng.Watermark())
	}
	if flush {
		out.write(eng.Flush())
	}
	return ref
}
