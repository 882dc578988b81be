//go:build race

package windowing_test

const raceEnabled = true
