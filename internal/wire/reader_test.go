package wire_test

import (
	"encoding/binary"
	"math"
	"testing"

	"aggregator/internal/wire"
)

func TestReaderReadsWhatWasWritten(t *testing.T) {
	var b []byte
	b = append(b, 7)
	b = binary.AppendUvarint(b, 300)
	b = binary.AppendVarint(b, -5)
	b = binary.AppendUvarint(b, math.MaxInt32)
	b = binary.LittleEndian.AppendUint32(b, 0xdeadbeef)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(2.5))
	b = append(binary.AppendUvarint(b, 3), "abc"...)
	b = binary.AppendUvarint(b, 2)
	b = append(b, 1, 2)
	r := wire.Reader{B: b}
	got := []any{r.Byte(), r.Uvarint(), r.Varint(), r.Int32(), r.Uint32(), r.Float64(), string(r.Counted()), r.Count(), r.Bytes(2)[1]}
	want := []any{byte(7), uint64(300), int64(-5), int32(math.MaxInt32), uint32(0xdeadbeef), 2.5, "abc", 2, byte(2)}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("field %d = %v, want %v", i, got[i], want[i])
		}
	}
	if r.Bad() || len(r.B) != 0 {
		t.Errorf("after the last field: Bad() = %v, %d bytes left, want false, 0", r.Bad(), len(r.B))
	}
}

func TestReaderFailureSticks(t *testing.T) {
	tests := map[string]struct {
		b    []byte
		read func(r *wire.Reader)
	}{
		"byte of nothing":        {nil, func(r *wire.Reader) { r.Byte() }},
		"truncated varint":       {[]byte{0x80}, func(r *wire.Reader) { r.Uvarint() }},
		"int32 too big":          {binary.AppendUvarint(nil, math.MaxInt32+1), func(r *wire.Reader) { r.Int32() }},
		"short uint32":           {[]byte{1, 2, 3}, func(r *wire.Reader) { r.Uint32() }},
		"short uint64":           {[]byte{1, 2, 3, 4, 5, 6, 7}, func(r *wire.Reader) { r.Uint64() }},
		"length beyond the end":  {append(binary.AppendUvarint(nil, 4), "abc"...), func(r *wire.Reader) { r.Counted() }},
		"count beyond the bytes": {append(binary.AppendUvarint(nil, 3), 1, 2), func(r *wire.Reader) { r.Count() }},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := wire.Reader{B: append(tt.b, 9, 9, 9, 9, 9, 9, 9, 9, 9)[:len(tt.b)]}
			tt.read(&r)
			if !r.Bad() {
				t.Fatalf("Bad() = false after a failed read of %x", tt.b)
			}
			if v := r.Uvarint(); v != 0 || r.Byte() != 0 || len(r.B) != 0 {
				t.Errorf("after a failure: Uvarint() = %d, want 0 and nothing left (%d bytes)", v, len(r.B))
			}
		})
	}
}
