package integration

import (
	"fmt"
	"math/rand/v2"
)

// callsConfig is a JSON config over calls(sid, t, d): tumbling or sliding
// windows with lateness, so runs have on-time and late firings and late
// events. It is by_key (the tests that use it produce a key's records to
// one partition and test the one-stage service); the repartition tests
// have their own.
func callsConfig(window string) string {
	return `
source:
  format: json
  key: [sid]
  partitioning: by_key
  timestamp: {field: t, layout: unix_ms}
watermark:
  strategy: bounded
  max_out_of_orderness: 1s
window: ` + window + `
aggregates:
  - {name: total, fn: sum, field: d}
  - {name: calls, fn: count}
`
}

const tumbling = "{type: tumbling, size: 5s, allowed_lateness: 2s}"

// calls returns n JSON records of keys sid_0..sid_{keys-1}, out of order
// by up to 1.5s, with every 37th record 4s late; seed makes it repeatable.
func calls(n, keys int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 1))
	const base = 1_900_000_000_000
	out := make([]string, n)
	for i := range out {
		t := base + int64(i)*50 - rng.Int64N(1500)
		if i%37 == 36 {
			t -= 4000
		}
		out[i] = fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d}`, rng.IntN(keys), t, rng.IntN(100))
	}
	return out
}
