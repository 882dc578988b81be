package config

import "strconv"

// maxTopK bounds top_k's k: a result lists k values, and one beyond a few
// thousand is a dump of the window, not a top list.
const maxTopK = 10_000

// validateTopK checks aggregate a (at key) if it is a top_k.
func validateTopK(a Aggregate, key string) *KeyError {
	if a.Fn != "top_k" || a.K > 0 && a.K <= maxTopK {
		return nil
	}
	return &KeyError{Key: key + ".k", Value: strconv.Itoa(a.K), Reason: "required for fn top_k: a whole number from 1 to " + strconv.Itoa(maxTopK) + ", such as 10"}
}
