package state

// Reference is the Restorer of the release before the arena
// (reference_test.go), for TestRestorerMatchesReference.
type Reference = reference

// NewReference returns an empty Reference.
func NewReference() *Reference { return newReference() }

// NewRestorerCompacting returns a Restorer that compacts an arena once
// minWaste bytes of it are dead (and more than are live).
func NewRestorerCompacting(minWaste int64) *Restorer {
	r := NewRestorer()
	r.slices.minWaste, r.windows.minWaste = minWaste, minWaste
	return r
}

// Compactions returns how many times r compacted an arena.
func (r *Restorer) Compactions() int { return r.compactions }

// Decode is decode: a slice or window record into en, reusing its memory.
var Decode = decode

// NewDrainingCompacting is NewRestorerCompacting for NewDraining.
func NewDrainingCompacting(minWaste int64) *Restorer {
	r := NewRestorerCompacting(minWaste)
	r.draining = true
	return r
}
