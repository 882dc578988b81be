//go:build race

package main

// raceEnabled: the race detector slows the demo tests' instances several times.
const raceEnabled = true
