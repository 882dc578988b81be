//go:build race

package integration

// raceEnabled: the tests run under the race detector, which slows the
// service several times; long runs scale down.
const raceEnabled = true
