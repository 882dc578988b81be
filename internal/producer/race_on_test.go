//go:build race

package producer_test

// raceEnabled: the race detector makes sync.Pool drop a random quarter of
// what is put back, so pooled memory is partly allocated again.
const raceEnabled = true
