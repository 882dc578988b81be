//go:build !race && !invariants

package windowing

const invariants = false
