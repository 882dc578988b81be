// Package record decodes Kafka record values (JSON or CSV) into the few
// fields the engine needs: event time, group key, filter fields and one
// value per aggregate. It extracts only the configured fields with a
// single pass over the bytes and never builds a map of the whole record.
// Data problems come back as a *DecodeError, never as a panic. The package
// is pure: it never reads the clock. A Decoder is not safe for concurrent
// use; make one per goroutine.
package record
