package wire

import (
	"encoding/binary"
	"math"
)

// Reader reads fields from the front of B. Once a read fails (too few
// bytes, a bad varint, a length beyond what is left), Bad reports true
// and every read returns zero; B is then empty.
type Reader struct {
	B   []byte
	bad bool
}

// Bad reports whether a read failed (or Fail was called).
func (r *Reader) Bad() bool { return r.bad }

// Fail marks r bad: what it read does not hold together.
func (r *Reader) Fail() { r.bad, r.B = true, nil }

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if len(r.B) == 0 {
		r.Fail()
		return 0
	}
	v := r.B[0]
	r.B = r.B[1:]
	return v
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	v, n := binary.Uvarint(r.B)
	if n <= 0 {
		r.Fail()
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Varint reads a signed varint.
func (r *Reader) Varint() int64 {
	v, n := binary.Varint(r.B)
	if n <= 0 {
		r.Fail()
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Int32 reads an unsigned varint of at most math.MaxInt32.
func (r *Reader) Int32() int32 {
	v := r.Uvarint()
	if v > math.MaxInt32 {
		r.Fail()
		return 0
	}
	return int32(v)
}

// Uint32 reads 4 bytes, little-endian.
func (r *Reader) Uint32() uint32 {
	if len(r.B) < 4 {
		r.Fail()
		return 0
	}
	v := binary.LittleEndian.Uint32(r.B)
	r.B = r.B[4:]
	return v
}

// Uint64 reads 8 bytes, little-endian.
func (r *Reader) Uint64() uint64 {
	if len(r.B) < 8 {
		r.Fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(r.B)
	r.B = r.B[8:]
	return v
}

// Float64 reads a float64 as Uint64's bits.
func (r *Reader) Float64() float64 { return math.Float64frombits(r.Uint64()) }

// Bytes reads the next n bytes (a slice of B, not copied).
func (r *Reader) Bytes(n uint64) []byte {
	if n > uint64(len(r.B)) {
		r.Fail()
		return nil
	}
	v := r.B[:n:n]
	r.B = r.B[n:]
	return v
}

// Counted reads bytes prefixed with their length (a uvarint).
func (r *Reader) Counted() []byte { return r.Bytes(r.Uvarint()) }

// Count reads a number of items (a uvarint) of which each takes at least
// one byte of what is left: a count no input could hold fails, so a
// caller may size a slice by it.
func (r *Reader) Count() int {
	n := r.Uvarint()
	if n > uint64(len(r.B)) {
		r.Fail()
		return 0
	}
	return int(n)
}
