//go:build race

package windowing_test

// raceEnabled: the race detector slows the property tests ~6×, so they run
// fewer seeds under it (propertySeeds).
const raceEnabled = true
