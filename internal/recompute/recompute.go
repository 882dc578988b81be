package recompute

import (
	"context"
	"math"
	"slices"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/registry"
)

// Now is the wall clock of a recomputation: none.
const Now = math.MaxInt64

// An Engine recomputes windows record by record.
type Engine struct {
	proc         *pipeline.Processor
	reg          *registry.Client
	perPartition bool // each partition's windows follow its own watermark
}

// New returns an Engine over the state partitions given (see
// record.Input.Partition), all assigned from the start, as a consumer of
// the whole dump would have them: a partition's first record does not
// lower the watermark later. With a registry format, reg fetches the
// schemas of the records it meets; otherwise it is nil.
func New(cfg config.Config, reg *registry.Client, partitions []int32) (*Engine, error) {
	// With scope global a group key is one state across the partitions,
	// W the minimum over them: what one instance computes from input
	// partitioned by the key. With scope partition each partition keeps
	// its own state and its windows follow its own watermark, as in the
	// service.
	proc, err := pipeline.New(cfg, pipeline.Mode{OneState: cfg.Watermark.GlobalScope()})
	if err != nil {
		return nil, err
	}
	for _, p := range partitions {
		proc.Assign(p, Now)
	}
	return &Engine{proc: proc, reg: reg, perPartition: cfg.Source.ByKey() && !cfg.Watermark.GlobalScope()}, nil
}

// Schemas returns the registry schemas of the input format; nil unless
// source.format is a registry format.
func (e *Engine) Schemas() *record.Schemas { return e.proc.Schemas() }

// Process applies one record, after fetching its schema with a registry
// format (an error only when the registry cannot answer). The Ready holds
// what the record emitted (most records emit nothing) and is valid until
// the next call.
func (e *Engine) Process(ctx context.Context, in *ready.Input) (ready.Ready, error) {
	if e.reg != nil {
		if err := e.reg.Resolve(ctx, e.proc.Schemas(), slices.Values([][]byte{in.Value})); err != nil {
			return ready.Ready{}, err
		}
	}
	e.proc.Process(in, Now)
	return e.proc.Step(), nil
}

// Flush fires every open window, as at the end of a replay, and returns
// what that emitted.
func (e *Engine) Flush() ready.Ready {
	e.proc.Flush()
	return e.proc.Step()
}

// Watermark returns the watermark the windows follow (with scope
// partition, the lowest of the partitions').
func (e *Engine) Watermark() int64 { return e.proc.Watermark() }

// PartitionWatermark returns the watermark partition's windows follow:
// its own with watermark.scope partition and by_key, Watermark otherwise.
func (e *Engine) PartitionWatermark(partition int32) int64 {
	if !e.perPartition {
		return e.Watermark()
	}
	wm, _ := e.proc.PartitionWatermark(partition)
	return wm
}

// OpenWindows returns how many (key, window) states are open.
func (e *Engine) OpenWindows() int { return e.proc.OpenWindows() }
