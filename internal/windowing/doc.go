// Package windowing is the event-time window engine: window assigners
// (Tumbling, Sliding, Calendar), per-(partition, key) window state,
// allowed lateness, and firings with Flink's semantics. Engine runs
// tumbling, sliding and calendar windows (calendar.go); Sessions runs
// session and global windows (session.go, global.go); Counts runs count
// windows (count.go). All three keep one contract, Operator (contract.go),
// which is what the core drives; New picks one for a Spec, built once from
// the validated config. Early firings (early.go) and the top_k aggregate
// (topk.go) work with every kind they apply to. Engine and Sessions check
// their structure after every change under -race (engine_check.go,
// session_check.go).
//
// An Engine keeps, for every (partition, key), slices ("panes") of length
// gcd(size, slide): a record updates exactly one pane, and a window's result
// is the merge of its panes when it fires, so a sliding window costs about
// as much per record as a tumbling one. Sliding windows of 3 panes or more
// merge through a per-key two-stacks (FIFO) aggregation (fifo.go), so an
// on-time firing costs amortized O(1) merges whatever size/slide is.
// Keys live in a slab indexed by int32 (found through an open-addressing
// table, keytable.go) and panes in a chunked pool (pool.go), so a key with
// one tumbling window costs about 120 bytes and no allocation besides its
// text. Firings are driven by Advance, which fires due windows across all
// partitions in order of window end, then key (record.Compare field by
// field), then partition.
//
// Two-phase aggregation (fold.go, docs/design.md#two-phase-aggregation):
// Folds folds records of one key and pane into a Partial as the Engine
// adds them, for stage 1 of the repartition stage, and the Engine merges a
// Partial into its pane (Merge), where Mergeable says the merge gives
// what adding its records one by one would.
//
// For durable state (snapshot.go), the Engine notes what changed since the
// last Changes call (a flag per pane and sliding window, a list of dirty
// ones, tombstones of dropped ones that were handed out) and restores a
// partition's entries; a restored window that fired never fires again with
// less than it had, whatever the new owner's watermark.
//
// The package is pure: it never reads the clock. Times are int64
// milliseconds. An Engine is not safe for concurrent use.
package windowing
