package pipeline

import (
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/state"
	"aggregator/internal/watermark"
)

// The Processor's methods the core drives it by, exported for the tests
// that drive a Processor alone as the core would (a single stage: the
// commit protocol, restores, the peers' watermarks).

// WithOneList gives p, just made, one operator list for every partition
// following the merged watermark: the shape of by_key with
// watermark.scope global before each partition had its own list, which
// the tests compare the lists per partition with.
func WithOneList(p *Processor) {
	ops, err := newOperators(p.spec, resultSink{p, p.cfg.State.ConfigVersion}, oneList, p.tracking)
	if err != nil {
		panic(err)
	}
	p.ops = ops
}

func (p *Processor) Abort(now int64) { p.abort(now) }

func (p *Processor) Accept() { p.accept() }

func (p *Processor) Apply(in *ready.Input, rec *record.Record, kind record.Kind, decodeErr error, now int64) (out Outcome, applied bool) {
	return p.apply(in, rec, kind, decodeErr, now)
}

func (p *Processor) ApplyMark(partition int32, offset int64, m watermark.Mark) (applied bool) {
	return p.applyMark(partition, offset, m)
}

func (p *Processor) Checkpoint() (data, positions []ChangelogRecord) { return p.checkpoint() }

func (p *Processor) Commit() ready.Ready { return p.commit() }

func (p *Processor) Fetched(partition int32, hwm, now int64) { p.fetched(partition, hwm, now) }

func (p *Processor) GenerationReport(partition int32) GenerationReport {
	return p.generationReport(partition)
}

func (p *Processor) Generations() int { return p.generations() }

func (p *Processor) GroupPartition(partition int32) (wm int64, idle, reported bool) {
	return p.groupPartition(partition)
}

func (p *Processor) IdleCount() int { return p.idleCount() }

func (p *Processor) Lag(partition int32) (lag int64, ok bool) { return p.lag(partition) }

func (p *Processor) NewDecoder() (*record.Decoder, error) { return p.newDecoder() }

func (p *Processor) Peer(partition int32, wm int64, idle bool) { p.peer(partition, wm, idle) }

func (p *Processor) PositionsUnwritten() { p.positionsUnwritten() }

func (p *Processor) Restore(partition int32, r *state.Restorer, now int64) (state.Result, error) {
	return p.restore(partition, r, now)
}

func (p *Processor) Revoke(partition int32) { p.revoke(partition) }

func (p *Processor) SetCaughtUp(partition int32, caughtUp bool, now int64) {
	p.setCaughtUp(partition, caughtUp, now)
}

func (p *Processor) Skip(in *ready.Input) { p.skip(in) }

func (p *Processor) SourceTable(partition int32) watermark.Table { return p.sourceTable(partition) }

func (p *Processor) TakeConflicts(now int64) (n int64, log ready.Conflict, ok bool) {
	return p.takeConflicts(now)
}

func (p *Processor) TakeGenerationSkips() int64 { return p.takeGenerationSkips() }

func (p *Processor) Tick(now int64) { p.tick(now) }

func (p *Processor) Unfetched() map[int32]int64 { return p.unfetched() }

func (p *Processor) Unrestored() []int32 { return p.unrestored() }

func (p *Processor) Build(partition int32, r *state.Restorer) *Built { return p.build(partition, r) }

func (p *Processor) Attach(b *Built, now int64) (state.Result, error) { return p.attach(b, now) }

// Warm, Drain and BuildWarm are Core's, on the Processor.
func (p *Processor) Warm(partition int32) *Warm { return p.newWarm(partition) }

func (p *Processor) Drain(w *Warm) error { return p.drain(w) }

func (p *Processor) BuildWarm(w *Warm) *Built { return p.buildWarm(w) }
