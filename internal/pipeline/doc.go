// Package pipeline is the pure core shared by `replay`, `run` and `demo`:
// decode, future guard, window assignment (one window operator per
// config generation: by_key with watermark.scope global, one operator
// for the partitions of one generation and a list of its own for a
// partition of several or of one it cut over to, following the merged
// watermark; with
// watermark.scope partition and in stage 2 of the repartition stage, a
// list per partition following the partition's own), watermark update, firings (docs/semantics.md#what-happens-to-each-record), and each partition's progress (its
// position, whether it is restored, the changelog's tags).
//
// A service instance runs one Core, which holds every stage its config
// needs: the windows (by_key's input partitions, or stage 2's repartition
// partitions), stage 1 of source.partitioning repartition
// (repartition.Stage) and the peers' watermarks (watermark topic). It
// numbers the partitions (Layout) and takes inputs: assignments and
// revocations, restored changelog partitions, fetched records (Decode,
// then Apply) and ticks (the caller's wall-clock now, in ms). It hands
// back what must be written as one ready.Ready per step: Step the outputs
// so far, Commit also the changelog records, positions, watermarks to
// publish and offsets (by topic and partition) of a commit, with the
// stats the metrics read. The shell writes a commit Ready whole, then
// calls Accept; if any of it failed it calls Abort, and the core goes
// back to the last accepted state (the changelog holds it: every window
// partition is restored again, stage 1 starts again from its committed
// offsets), so nothing produced from an aborted step reaches the next
// commit. A revocation is applied to the state as it is when it comes in:
// its firings are in the next Ready. A Processor is the window stage
// alone (replay runs one), its modes given once (Mode).
//
// The core does no I/O, reads no clock, starts no goroutine and never
// calls up into the shell. A Core or a Processor is not safe for
// concurrent use; Core.Decode may run in other goroutines.
package pipeline
