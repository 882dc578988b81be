// Package verify compares what a deployment wrote (the latest result per
// (key, window) on the results topic, the late events and the dead
// letters) with a recomputation of the same input (package recompute),
// as docs/verify.md#what-it-reads-and-compares says: windows by count, every aggregate and bounds (not
// revision, watermark or firing), late events and dead letters by source
// topic, partition and offset. A difference that the late topic's
// recorded watermark explains (a record judged late live and on time in
// the recomputation, or the reverse) is counted apart, with the windows it
// changes, as explained by timing.
//
// With config generations (docs/verify.md#config-generations, NewGenerations), each window is
// compared under the generation that owns it in its state partition (the
// latest cut-over at or before its start), fed by one recomputation per
// generation (RecordGenerations); what no recomputation can match (a
// retired generation's windows and results, sessions across a cut-over,
// count windows of a partition that cut over) is counted apart.
//
// A Comparer is fed what was found first (FoundResult, FoundLate,
// FoundDeadLetter), then the recomputation record by record (Record);
// it compares a window as soon as the recomputation closes it, so its
// memory is the found results of the range plus the windows not yet
// closed. It does no I/O and is not safe for concurrent use.
package verify
