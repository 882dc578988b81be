// Package repartition is the first stage of source.partitioning
// repartition (docs/scaling.md#the-repartition-stage), as a pure core: it decodes and filters input
// records, dead-letters the bad ones, runs a watermark generator per input
// partition, and hands back a ready.Ready whose outputs are repartition
// records (an accepted input record under its group key, for the
// repartition topic) and, at each commit after the data, watermark
// markers for every repartition partition. It keeps no changelog: after
// a restart or an abort it starts again from the committed input offsets
// with fresh generators, and the second stage keeps the highest watermark
// it saw of each source partition, so its watermark never goes back.
//
// The package also holds the encoding of a repartition record (both
// formats: Format1's header, Format2's value), the one place stage 1
// writes and stage 2 reads it. It never reads the
// clock or does I/O; a Stage is not safe for concurrent use.
package repartition
