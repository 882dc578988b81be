package integration

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestZZDebugSeed7(t *testing.T) {
	seed := uint64(7)
	data := rand.New(rand.NewPCG(seed, 1))
	s, _, _ := newDurKindStream(t, "repartition", seed, "exactly_once")
	for r := range 8 {
		s.chunk(data, 300+data.IntN(600), r > 0, r == 7)
	}
	chunk := 0
	for i, l := range s.lines {
		for chunk < len(s.chunks) && i >= s.chunks[chunk] {
			chunk++
		}
		if strings.Contains(l, `"sid_4"`) && (strings.Contains(l, `"d":26}`) || strings.Contains(l, `"d":56}`)) {
			fmt.Println(i, "chunk", chunk, "part", s.part[i], l)
		}
	}
}
