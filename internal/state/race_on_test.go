//go:build race

package state_test

// raceEnabled reports whether the race detector is on: tests that take
// long under it run fewer cases.
const raceEnabled = true
