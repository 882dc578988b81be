//go:build race || invariants

package invariants

// Enabled turns on the checks: this build has the race detector or the
// invariants tag.
const Enabled = true
