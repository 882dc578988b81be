// Package consumer runs the Kafka service: a franz-go consumer group on
// source.topics feeding the pipeline, with outputs produced by a
// producer.Writer and offsets committed at least once.
//
// A partition's committed offset never passes a record still held in an
// open window, and moves only after every output caused by the records
// before it has been acknowledged. The commit's metadata carries what the
// partition's next owner needs to rebuild its windows silently from that
// offset: the offset up to which outputs were emitted, the partition's
// watermark generator state, and the merged watermark's steps since the
// committed offset (see Checkpoint).
//
// A Consumer's Run, Drain and Close are called from one goroutine; Ready is
// safe for concurrent use.
package consumer
