//go:build race

package windowing_test

// raceEnabled: the race detector slows the property tests ~6×, so they run
// fewer seeds under it; CI also runs them without it, with every seed.
const raceEnabled = true
