package record

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"testing"
)

// The word-at-a-time helpers are checked against their byte-at-a-time
// meaning: every byte value at every position, among random neighbours.

func special(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }

func TestSpecialBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for pos := range 8 {
		for c := range 256 {
			for range 64 {
				var w [8]byte
				for k := range w {
					w[k] = byte(r.IntN(256))
					for k < pos && special(w[k]) {
						w[k] = byte(r.IntN(256))
					}
				}
				w[pos] = byte(c)
				want := 8
				for k, b := range w {
					if special(b) {
						want = k
						break
					}
				}
				if got := bits.TrailingZeros64(specialBytes(binary.LittleEndian.Uint64(w[:]))) >> 3; got != want {
					t.Fatalf("specialBytes(%q) flags byte %d first, want %d", w, got, want)
				}
				if got, want := plainASCII(w[:]), want == 8 && isASCII(w[:]); got != want {
					t.Fatalf("plainASCII(%q) = %v, want %v", w, got, want)
				}
			}
		}
	}
}

func TestNonDigits(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for pos := range 8 {
		for c := range 256 {
			for range 16 {
				var w [8]byte
				for k := range w {
					w[k] = byte(r.IntN(256))
				}
				w[pos] = byte(c)
				m := nonDigits(binary.LittleEndian.Uint64(w[:]))
				for k, b := range w {
					if got, want := m>>(8*k+7)&1 == 1, b < '0' || b > '9'; got != want {
						t.Fatalf("nonDigits(%q) flags byte %d: %v, want %v", w, k, got, want)
					}
				}
			}
		}
	}
}

func TestEightDigits(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 100_000 {
		n := r.IntN(9) // digits; the other bytes are zero, as leading zeros
		var w [8]byte
		text := ""
		for k := 8 - n; k < 8; k++ {
			w[k] = '0' + byte(r.IntN(10))
			text += string(w[k])
		}
		want, _ := strconv.ParseUint("0"+text, 10, 64)
		if got := eightDigits(binary.LittleEndian.Uint64(w[:])); got != want {
			t.Fatalf("eightDigits(%q) = %d, want %d", w, got, want)
		}
	}
}

func TestIsASCII(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for n := range 40 {
		for pos := range n {
			s := make([]byte, n)
			for k := range s {
				s[k] = byte(r.IntN(0x80))
			}
			if !isASCII(s) {
				t.Fatalf("isASCII(%q) = false, want true", s)
			}
			s[pos] = 0x80 + byte(r.IntN(0x80))
			if isASCII(s) {
				t.Fatalf("isASCII(%q) = true, want false", s)
			}
		}
	}
}
