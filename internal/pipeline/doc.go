// Package pipeline is the one per-record path shared by `replay`, `run` and
// `demo`: decode, future guard, window assignment against the merged
// watermark, watermark update, firings (SPEC §3). It does no I/O and never
// reads the clock: callers pass the wall-clock now in ms. A Processor is not
// safe for concurrent use; decoding may run in other goroutines with
// decoders from NewDecoder.
package pipeline
