// Package invariants holds checks that are too slow for production and
// compile in under the race detector (or the invariants build tag), as
// Pebble's internal/invariants does: Enabled is true in those builds, so
// every -race test run makes them, and false otherwise, so that the
// compiler drops them.
//
// A Mutex is a lock with a rank in a lock order: with Enabled, Lock
// panics, naming both locks, when the calling goroutine already holds a
// Mutex of the same Order whose rank is not below it (the other order
// could deadlock). Without Enabled it is a lock and a few words. It waits
// on a channel, so that a goroutine waiting for it is durably blocked in a
// testing/synctest bubble (a sync.Mutex is not). A Mutex and an Order are
// safe for concurrent use; the zero Mutex is an unchecked lock until Init.
package invariants
