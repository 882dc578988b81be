// Package record decodes Kafka record values (JSON, CSV, or Avro,
// Protobuf and JSON in Confluent's Schema Registry wire format) into the
// few fields the engine needs: event time, group key, filter fields and
// one value per aggregate. Input, a record as read from Kafka or a replay
// file, is the one record envelope: the decoder reads it, and late events
// and dead letters carry it out (ready.Input is an alias). It extracts only the configured fields with a
// single pass over the bytes and never builds a map of the whole record;
// the registry formats are read with the writer's schema, compiled once per
// schema id. It takes a Spec (Config.RecordSpec (in package config) builds it from a validated
// config) and, for the registry formats, a Schemas the caller fills: the
// package never does I/O and never reads the clock. Data problems come back
// as a *DecodeError, never as a panic; a missing or null aggregate field is
// not one: its Value is NullValue, which the aggregate skips. A Decoder is not safe for concurrent
// use; make one per goroutine. A Schemas is.
package record
