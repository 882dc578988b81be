// Package pipeline is the pure core shared by `replay`, `run` and `demo`:
// decode, future guard, window assignment against the merged watermark
// (with watermark.scope partition, and in stage 2 of the repartition
// stage, each partition's own: one window operator per partition),
// watermark update, firings (SPEC §3), and each partition's progress (its
// position, whether it is restored, the changelog's tags).
//
// The core takes inputs: records (with partition and offset),
// assignments and revocations, restored changelog partitions and ticks
// (the caller's wall-clock now, in ms). It hands back what must be written
// as a ready.Ready: Ready(false) the outputs so far, Ready(true) also the
// changelog records, positions and offsets of a commit. The shell writes a
// commit Ready whole, then calls Accept; if any of it failed it calls
// Abort, and the core goes back to the last accepted state (the changelog
// holds it: every partition is restored again), so nothing produced from
// an aborted step reaches the next commit. A revocation is applied to the
// state as it is when it comes in: its firings are in the next Ready.
//
// The core does no I/O, reads no clock, starts no goroutine and never
// calls up into the shell. A Processor is not safe for concurrent use;
// decoding may run in other goroutines with decoders from NewDecoder.
package pipeline
