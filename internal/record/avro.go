package record

import (
	"errors"
	"math"
	"strconv"

	"github.com/hamba/avro/v2"
)

// This file is the only one that knows github.com/hamba/avro: it parses
// Avro schemas (names, namespaces, references, logical types) into the
// avroNode programs that avroWalker runs over the binary encoding. A
// successor library needs only parseAvro and compileAvro rewritten.

// avroSchema is a parsed Avro writer schema.
type avroSchema = avro.Schema

var errUnknownType = errors.New("not an Avro, Protobuf or JSON schema")

// parseAvro parses sch with its references, each parsed before the schemas
// that name its types (avro.SchemaCache holds the named types).
func parseAvro(sch Schema) (avroSchema, error) {
	cache := &avro.SchemaCache{}
	var parseRefs func(refs []Reference, depth int) error
	parseRefs = func(refs []Reference, depth int) error {
		if depth > maxRefDepth {
			return errors.New("references nested too deeply")
		}
		for _, r := range refs {
			if err := parseRefs(r.Schema.References, depth+1); err != nil {
				return err
			}
			if _, err := avro.ParseWithCache(r.Schema.Text, "", cache); err != nil {
				return errors.New("reference " + strconv.Quote(r.Name) + ": " + err.Error())
			}
		}
		return nil
	}
	if err := parseRefs(sch.References, 0); err != nil {
		return nil, err
	}
	return avro.ParseWithCache(sch.Text, "", cache)
}

// maxRefDepth bounds chains of schema references.
const maxRefDepth = 32

// avroKind is an Avro type, as the walker reads it.
type avroKind uint8

const (
	avNull avroKind = iota
	avBool
	avInt // int and long: both zig-zag varints
	avFloat
	avDouble
	avBytes // bytes and string
	avRecord
	avEnum
	avArray
	avMap
	avUnion
	avFixed
)

// avroNode is one value of a compiled schema: how to read it and where its
// configured fields go.
type avroNode struct {
	kind    avroKind
	instant int64 // avInt timestamp-millis (1) or timestamp-micros (1000): the divisor to ms; 0 otherwise
	slot    int   // >= 0: the value is a configured field
	walk    bool  // a configured path goes below (records, and unions of them)
	minSize int   // the fewest bytes the value takes, to bound hostile counts
	fields  []*avroNode
	names   [][]byte // record: the field names, as JSON strings
	items   *avroNode
	options []*avroNode // union branches
	symbols [][]byte    // enum
	size    int         // fixed
}

// avroCompiler compiles a schema against the configured paths (the JSON
// scanner's trie of path nodes).
type avroCompiler struct {
	paths []pathNode
	skip  map[avro.Schema]*avroNode // nodes outside every path, by schema (named types may recur)
}

// compileAvro returns the program for s with the decoder's paths.
func compileAvro(s avroSchema, paths []pathNode) *avroNode {
	c := &avroCompiler{paths: paths, skip: map[avro.Schema]*avroNode{}}
	return c.node(s, 0)
}

// node compiles s where path node p (-1: none) would be.
func (c *avroCompiler) node(s avro.Schema, p int) *avroNode {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if p < 0 {
		if n, ok := c.skip[s]; ok {
			return n
		}
	}
	n := &avroNode{slot: -1}
	if p < 0 {
		c.skip[s] = n // before its children: a recursive type refers to itself
	} else {
		n.slot = c.paths[p].slot
		n.walk = len(c.paths[p].children) > 0
	}
	switch s := s.(type) {
	case *avro.PrimitiveSchema:
		c.primitive(n, s)
	case *avro.RecordSchema:
		n.kind = avRecord
		for _, f := range s.Fields() {
			n.names = append(n.names, AppendQuoted(nil, []byte(f.Name())))
			n.fields = append(n.fields, c.node(f.Type(), c.child(p, f.Name())))
			n.minSize += n.fields[len(n.fields)-1].minSize
		}
	case *avro.EnumSchema:
		n.kind, n.minSize = avEnum, 1
		for _, sym := range s.Symbols() {
			n.symbols = append(n.symbols, []byte(sym))
		}
	case *avro.ArraySchema:
		n.kind, n.minSize = avArray, 1
		n.items = c.node(s.Items(), -1)
	case *avro.MapSchema:
		n.kind, n.minSize = avMap, 1
		n.items = c.node(s.Values(), -1)
	case *avro.UnionSchema:
		// A union is its branch: the branch takes the slot and the paths.
		n.kind, n.minSize, n.slot, n.walk = avUnion, 1, -1, p >= 0
		for _, t := range s.Types() {
			n.options = append(n.options, c.node(t, p))
		}
	case *avro.FixedSchema:
		n.kind, n.size, n.minSize = avFixed, s.Size(), s.Size()
	}
	if n.kind != avRecord && n.kind != avUnion {
		n.walk = false // a path through a scalar, array or map finds nothing
	}
	return n
}

func (c *avroCompiler) primitive(n *avroNode, s *avro.PrimitiveSchema) {
	n.minSize = 1
	switch s.Type() {
	case avro.Null:
		n.kind, n.minSize = avNull, 0
	case avro.Boolean:
		n.kind = avBool
	case avro.Int:
		n.kind = avInt
	case avro.Long:
		n.kind = avInt
		if l := s.Logical(); l != nil {
			switch l.Type() {
			case avro.TimestampMillis:
				n.instant = 1
			case avro.TimestampMicros:
				n.instant = 1000
			}
		}
	case avro.Float:
		n.kind, n.minSize = avFloat, 4
	case avro.Double:
		n.kind, n.minSize = avDouble, 8
	default: // bytes, string
		n.kind = avBytes
	}
}

// child returns the path node below p named name, or -1.
func (c *avroCompiler) child(p int, name string) int {
	if p < 0 {
		return -1
	}
	for _, ch := range c.paths[p].children {
		if c.paths[ch].name == name {
			return ch
		}
	}
	return -1
}

// maxEmptyItems bounds the item count of an array or map whose items take
// no bytes (nulls), which the length of the record cannot bound.
const maxEmptyItems = 1 << 16

// avroWalker reads one Avro body with a compiled schema, putting the
// configured fields into out.
type avroWalker struct {
	data []byte
	out  *binFields
}

func (w *avroWalker) fail(detail string) error {
	return &DecodeError{Reason: ReasonBadPayload, Detail: detail}
}

var errTruncated = &DecodeError{Reason: ReasonBadPayload, Detail: "the Avro body ends early"}

// varint reads a zig-zag varint at i.
func (w *avroWalker) varint(i int) (int64, int, error) {
	var u uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if i >= len(w.data) {
			return 0, i, errTruncated
		}
		b := w.data[i]
		i++
		u |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return int64(u>>1) ^ -int64(u&1), i, nil
		}
	}
	return 0, i, w.fail("a varint longer than 10 bytes")
}

// length reads a byte or item count at i and checks it against what is
// left of the body (each item taking at least min bytes).
func (w *avroWalker) length(i, min int) (int, int, error) {
	n, i, err := w.varint(i)
	if err != nil {
		return 0, i, err
	}
	limit := int64(len(w.data) - i)
	if min > 0 {
		limit /= int64(min)
	} else {
		limit = maxEmptyItems
	}
	if n < 0 || n > limit {
		return 0, i, w.fail("a length of " + strconv.FormatInt(n, 10) + " at offset " + strconv.Itoa(i) + " does not fit the body")
	}
	return int(n), i, nil
}

// value reads the value of n at i and returns the offset after it.
func (w *avroWalker) value(n *avroNode, i, depth int) (int, error) {
	if depth >= maxDepth {
		return i, w.fail("nested too deeply")
	}
	if n.slot < 0 && !n.walk {
		return w.skip(n, i, depth)
	}
	switch n.kind {
	case avUnion:
		return w.union(n, i, depth, w.value)
	case avRecord:
		end := i
		var err error
		if n.slot >= 0 {
			start := len(w.out.buf)
			if w.out.buf, end, err = w.render(w.out.buf, n, i, depth); err != nil {
				return end, err
			}
			w.out.slots[n.slot] = token{kind: tokObject, text: w.out.buf[start:len(w.out.buf):len(w.out.buf)]}
		}
		if n.walk {
			for _, f := range n.fields {
				if i, err = w.value(f, i, depth+1); err != nil {
					return i, err
				}
			}
			end = i
		}
		return end, nil
	}
	return w.capture(n, i, depth)
}

// union reads a branch index at i and then the branch with next.
func (w *avroWalker) union(n *avroNode, i, depth int, next func(*avroNode, int, int) (int, error)) (int, error) {
	b, i, err := w.varint(i)
	if err != nil {
		return i, err
	}
	if b < 0 || b >= int64(len(n.options)) {
		return i, w.fail("union branch " + strconv.FormatInt(b, 10) + " does not exist")
	}
	return next(n.options[b], i, depth+1)
}

// capture reads a value that is not a record into its slot.
func (w *avroWalker) capture(n *avroNode, i, depth int) (int, error) {
	out := w.out
	tok := &out.slots[n.slot]
	switch n.kind {
	case avNull:
		*tok = token{kind: tokNull}
		return i, nil
	case avBool:
		if i >= len(w.data) {
			return i, errTruncated
		}
		*tok = token{kind: tokBool, text: boolText[w.data[i]&1]}
		if w.data[i] > 1 {
			return i, w.fail("a boolean byte other than 0 or 1")
		}
		return i + 1, nil
	case avInt:
		v, end, err := w.varint(i)
		if err != nil {
			return end, err
		}
		if n.instant > 0 {
			out.setInstant(n.slot, floorDiv(v, n.instant))
			return end, nil
		}
		*tok = token{kind: tokNumber, text: out.appendInt(v)}
		return end, nil
	case avFloat, avDouble:
		f, end, err := w.float(n, i)
		if err != nil {
			return end, err
		}
		*tok = w.floatToken(f, n.kind == avFloat)
		return end, nil
	case avBytes, avFixed:
		start, end, err := w.bytes(n, i)
		if err != nil {
			return end, err
		}
		*tok = token{kind: tokString, text: w.data[start:end:end]}
		return end, nil
	case avEnum:
		sym, end, err := w.enum(n, i)
		if err != nil {
			return end, err
		}
		*tok = token{kind: tokString, text: sym}
		return end, nil
	}
	start := len(out.buf) // arrays and maps: their JSON text
	buf, end, err := w.render(out.buf, n, i, depth)
	out.buf = buf
	if err != nil {
		return end, err
	}
	kind := tokArray
	if n.kind == avMap {
		kind = tokObject
	}
	*tok = token{kind: kind, text: out.buf[start:len(out.buf):len(out.buf)]}
	return end, nil
}

// avroMapKey reads a map's keys.
var avroMapKey = &avroNode{kind: avBytes, slot: -1}

var boolText = [2][]byte{[]byte("false"), []byte("true")}

func floorDiv(v, d int64) int64 {
	q := v / d
	if v%d < 0 {
		q--
	}
	return q
}

func (w *avroWalker) float(n *avroNode, i int) (float64, int, error) {
	if n.kind == avFloat {
		if len(w.data)-i < 4 {
			return 0, i, errTruncated
		}
		b := w.data[i:]
		return float64(math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)), i + 4, nil
	}
	if len(w.data)-i < 8 {
		return 0, i, errTruncated
	}
	b := w.data[i:]
	bits := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	return math.Float64frombits(bits), i + 8, nil
}

// floatToken is a number's token: its shortest text (for a float, the
// shortest that reads back as the same float32), or a string for NaN and
// infinities, which JSON has no number for.
func (w *avroWalker) floatToken(f float64, single bool) token {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return token{kind: tokString, text: w.out.appendText([]byte(strconv.FormatFloat(f, 'g', -1, 64)))}
	}
	bitSize := 64
	if single {
		bitSize = 32
	}
	start := len(w.out.buf)
	w.out.buf = strconv.AppendFloat(w.out.buf, f, 'g', -1, bitSize)
	return token{kind: tokNumber, text: w.out.buf[start:len(w.out.buf):len(w.out.buf)]}
}

// bytes returns where the bytes, string or fixed at i are.
func (w *avroWalker) bytes(n *avroNode, i int) (int, int, error) {
	size := n.size
	if n.kind == avBytes {
		var err error
		if size, i, err = w.length(i, 1); err != nil {
			return i, i, err
		}
	}
	if len(w.data)-i < size {
		return i, i, errTruncated
	}
	return i, i + size, nil
}

func (w *avroWalker) enum(n *avroNode, i int) ([]byte, int, error) {
	v, end, err := w.varint(i)
	if err != nil {
		return nil, end, err
	}
	if v < 0 || v >= int64(len(n.symbols)) {
		return nil, end, w.fail("enum index " + strconv.FormatInt(v, 10) + " does not exist")
	}
	return n.symbols[v], end, nil
}

// blocks calls item for each item of the array or map at i: Avro writes
// them in blocks, each a count (negative: followed by its size in bytes)
// and its items, until a count of 0.
func (w *avroWalker) blocks(n *avroNode, i, depth int, item func(int) (int, error)) (int, error) {
	min := n.items.minSize
	if n.kind == avMap {
		min++ // the key's length
	}
	for {
		count, next, err := w.varint(i)
		if err != nil {
			return next, err
		}
		i = next
		if count == 0 {
			return i, nil
		}
		if count < 0 {
			count = -count
			if _, i, err = w.length(i, 1); err != nil { // the block's size: not needed when items are read
				return i, err
			}
		}
		limit := int64(maxEmptyItems)
		if min > 0 {
			limit = int64(len(w.data)-i)/int64(min) + 1
		}
		if count < 0 || count > limit {
			return i, w.fail("a block of " + strconv.FormatInt(count, 10) + " items does not fit the body")
		}
		for range count {
			if i, err = item(i); err != nil {
				return i, err
			}
		}
	}
}

// skip passes over the value of n at i.
func (w *avroWalker) skip(n *avroNode, i, depth int) (int, error) {
	if depth >= maxDepth {
		return i, w.fail("nested too deeply")
	}
	var err error
	switch n.kind {
	case avNull:
		return i, nil
	case avBool:
		if i >= len(w.data) {
			return i, errTruncated
		}
		return i + 1, nil
	case avInt, avEnum:
		_, i, err = w.varint(i)
		return i, err
	case avFloat, avDouble:
		_, i, err = w.float(n, i)
		return i, err
	case avBytes, avFixed:
		_, i, err = w.bytes(n, i)
		return i, err
	case avRecord:
		for _, f := range n.fields {
			if i, err = w.skip(f, i, depth+1); err != nil {
				return i, err
			}
		}
		return i, nil
	case avUnion:
		return w.union(n, i, depth, w.skip)
	}
	return w.blocks(n, i, depth, func(i int) (int, error) {
		if n.kind == avMap {
			var err error
			if _, i, err = w.bytes(avroMapKey, i); err != nil {
				return i, err
			}
		}
		return w.skip(n.items, i, depth+1)
	})
}

// render appends the value of n at i as JSON (a union as its branch,
// bytes as a string) and returns the offset after it.
func (w *avroWalker) render(buf []byte, n *avroNode, i, depth int) ([]byte, int, error) {
	if depth >= maxDepth {
		return buf, i, w.fail("nested too deeply")
	}
	var err error
	switch n.kind {
	case avNull:
		return append(buf, "null"...), i, nil
	case avBool:
		if i >= len(w.data) {
			return buf, i, errTruncated
		}
		return append(buf, boolText[w.data[i]&1]...), i + 1, nil
	case avInt:
		var v int64
		if v, i, err = w.varint(i); err != nil {
			return buf, i, err
		}
		return strconv.AppendInt(buf, v, 10), i, nil
	case avFloat, avDouble:
		var f float64
		if f, i, err = w.float(n, i); err != nil {
			return buf, i, err
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return strconv.AppendQuote(buf, strconv.FormatFloat(f, 'g', -1, 64)), i, nil
		}
		bitSize := 64
		if n.kind == avFloat {
			bitSize = 32
		}
		return strconv.AppendFloat(buf, f, 'g', -1, bitSize), i, nil
	case avBytes, avFixed:
		var start int
		if start, i, err = w.bytes(n, i); err != nil {
			return buf, i, err
		}
		return AppendQuoted(buf, w.data[start:i]), i, nil
	case avEnum:
		var sym []byte
		if sym, i, err = w.enum(n, i); err != nil {
			return buf, i, err
		}
		return AppendQuoted(buf, sym), i, nil
	case avUnion:
		var b int64
		if b, i, err = w.varint(i); err != nil {
			return buf, i, err
		}
		if b < 0 || b >= int64(len(n.options)) {
			return buf, i, w.fail("union branch " + strconv.FormatInt(b, 10) + " does not exist")
		}
		return w.render(buf, n.options[b], i, depth+1)
	case avRecord:
		buf = append(buf, '{')
		for k, f := range n.fields {
			if k > 0 {
				buf = append(buf, ',')
			}
			buf = append(append(buf, n.names[k]...), ':')
			if buf, i, err = w.render(buf, f, i, depth+1); err != nil {
				return buf, i, err
			}
		}
		return append(buf, '}'), i, nil
	}
	open, close := byte('['), byte(']')
	if n.kind == avMap {
		open, close = '{', '}'
	}
	buf = append(buf, open)
	first := true
	i, err = w.blocks(n, i, depth, func(i int) (int, error) {
		if !first {
			buf = append(buf, ',')
		}
		first = false
		var err error
		if n.kind == avMap {
			var start int
			if start, i, err = w.bytes(avroMapKey, i); err != nil {
				return i, err
			}
			buf = append(AppendQuoted(buf, w.data[start:i]), ':')
		}
		buf, i, err = w.render(buf, n.items, i, depth+1)
		return i, err
	})
	return append(buf, close), i, err
}
