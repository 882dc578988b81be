//go:build !race && !invariants

package invariants

// Enabled turns on the checks: off in this build (no race detector, no
// invariants tag).
const Enabled = false
