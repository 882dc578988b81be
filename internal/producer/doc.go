// Package producer writes the records of a ready.Ready's outputs: window
// results to the results topic, late events to the late topic and dead
// letters to the dead-letter topic (docs/results.md). It knows the core only by
// the ready types. A Writer's methods are called from one goroutine, while
// its produce promises run on the Kafka client's goroutines, so the error
// and acknowledgement state it exposes is safe for concurrent use.
package producer
