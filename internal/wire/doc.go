// Package wire reads the fields of the service's own binary layouts: the
// compact form of a decoded record (package record), the repartition
// record (package repartition) and a partial's pane state (package
// windowing). A Reader reads varints, fixed-width numbers and
// length-prefixed bytes from the front of a slice; its first failure
// sticks: every later read returns zero, so a caller checks Bad once,
// after the last field. A Reader is a value owned by one goroutine; it
// never allocates.
package wire
