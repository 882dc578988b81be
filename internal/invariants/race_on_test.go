//go:build race || invariants

package invariants

const raceOrTag = true
