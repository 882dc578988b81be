// Package recompute recomputes windows from recorded input with the
// semantics of `replay --kcat` (docs/scaling.md#what-by_key-does-not-give): every partition of the dump
// is assigned from the start, a group key is one state across the
// partitions (watermark.scope global) or each partition keeps its own
// (scope partition), the merged watermark is the minimum over the
// partitions, and wall-clock time plays no part (idleness and the future
// guard are off). `replay` and `verify` both run it. An Engine is not safe
// for concurrent use.
package recompute
