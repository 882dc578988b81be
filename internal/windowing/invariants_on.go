//go:build race || invariants

package windowing

// invariants turns on checks of the operators' structures after every change
// that are too slow for production; every -race test run makes them.
const invariants = true
