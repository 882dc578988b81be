package windowing

// CheckInvariants is Operator.check, for the property harness: it panics
// if op's structures are broken.
func CheckInvariants(op Operator) { op.check() }
