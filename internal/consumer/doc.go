// Package consumer runs the Kafka service: a franz-go consumer group on
// source.topics feeding the pipeline, with outputs produced by a
// producer.Writer, and window state made durable in the changelog topic
// (SPEC §7).
//
// A newly assigned partition is restored from its changelog partition
// before any of its input records is applied; input resumes at the offset
// the restored state reflects. Every commit writes what changed in the
// state since the last one. With exactly_once, outputs, changelog records
// and the consumed offsets are one Kafka transaction; when it aborts, the
// state goes back to the last commit (it is restored again). With
// at_least_once, outputs and state changes are acknowledged, then the
// partitions' positions, then the offsets are committed.
//
// Partitions of all input topics share one dense id space (topic after
// topic, in source.topics order): the engine's partition id and the
// changelog partition.
//
// A Consumer's Run, Drain and Close are called from one goroutine; Ready is
// safe for concurrent use.
package consumer
