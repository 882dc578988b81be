// Package watermark computes event-time watermarks (docs/semantics.md#watermarks): one generator
// per assigned partition (Bounded or Punctuated) and the merged watermark,
// the minimum over the partitions that are not idle. Watermarks are int64
// milliseconds since the epoch, math.MinInt64 meaning "none yet", and never
// go down. The package never reads the clock: idleness is judged from the
// now value the caller passes in. A Merged is not safe for concurrent use.
package watermark
