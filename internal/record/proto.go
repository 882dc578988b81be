package record

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"strconv"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Protobuf values: the registry holds .proto text, compiled here with
// github.com/bufbuild/protocompile (imports are the schema's references,
// and the well-known types are built in) into descriptors; protoWalker
// reads the wire encoding with protowire for the configured paths only.
// Objects and lists that a field path takes whole are rendered through
// dynamicpb, which allocates but is rare.

// protoSchema is a compiled .proto file.
type protoSchema = protoreflect.FileDescriptor

// protoMainFile names the registry's schema among its imports.
const protoMainFile = "aggregator/registry-schema.proto"

// parseProto compiles sch, its references supplying its imports.
func parseProto(sch Schema) (protoSchema, error) {
	srcs := map[string]string{protoMainFile: sch.Text}
	var add func(refs []Reference, depth int) error
	add = func(refs []Reference, depth int) error {
		if depth > maxRefDepth {
			return errors.New("references nested too deeply")
		}
		for _, r := range refs {
			srcs[r.Name] = r.Schema.Text
			if err := add(r.Schema.References, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := add(sch.References, 0); err != nil {
		return nil, err
	}
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(srcs)})}
	// In-memory sources: the context bounds nothing here.
	files, err := c.Compile(context.Background(), protoMainFile)
	if err != nil {
		return nil, err
	}
	return files[0], nil
}

// protoMessage returns the message that a wire-format value's message
// indexes name: the first index among the file's top-level messages, each
// next among the previous one's nested messages.
func protoMessage(fd protoSchema, indexes []int64) (protoreflect.MessageDescriptor, bool) {
	msgs := fd.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range indexes {
		if i < 0 || i >= int64(msgs.Len()) {
			return nil, false
		}
		md = msgs.Get(int(i))
		msgs = md.Messages()
	}
	return md, md != nil
}

// maxIndexes bounds the message indexes of a value (nesting of messages).
const maxIndexes = 32

// readIndexes reads the message indexes after the wire header into buf:
// a count then the indexes, zig-zag varints; a count of 0 means [0].
func readIndexes(b []byte, buf []int64) ([]int64, []byte, bool) {
	n, size := binary.Varint(b)
	if size <= 0 || n < 0 || n > maxIndexes {
		return nil, nil, false
	}
	b = b[size:]
	if n == 0 {
		return append(buf[:0], 0), b, true
	}
	buf = buf[:0]
	for range n {
		i, size := binary.Varint(b)
		if size <= 0 {
			return nil, nil, false
		}
		buf, b = append(buf, i), b[size:]
	}
	return buf, b, true
}

// protoMsg is a message compiled against the configured paths.
type protoMsg struct {
	desc   protoreflect.MessageDescriptor
	small  []*protoField // by field number, for numbers below maxSmallField
	large  map[protowire.Number]*protoField
	wanted []*protoField // with slots: their proto3 defaults when unset
}

// maxSmallField bounds the field numbers looked up in a slice.
const maxSmallField = 64

func (m *protoMsg) field(num protowire.Number) *protoField {
	if num < maxSmallField {
		return m.small[num]
	}
	return m.large[num]
}

// protoField is a field of a protoMsg on a configured path, with what its
// descriptor says looked up once.
type protoField struct {
	desc     protoreflect.FieldDescriptor
	kind     protoreflect.Kind
	slot     int       // >= 0: the value is a configured field
	msg      *protoMsg // a message a path goes below
	instant  bool      // a google.protobuf.Timestamp
	whole    bool      // a list, map or message taken whole: rendered as JSON
	implicit bool      // a proto3 scalar without presence: its default when unset
	enum     map[int32][]byte
	zero     []byte // the enum's first value's name
}

// compileProto compiles md for the path node p.
func compileProto(md protoreflect.MessageDescriptor, paths []pathNode, p int) *protoMsg {
	m := &protoMsg{desc: md, small: make([]*protoField, maxSmallField), large: map[protowire.Number]*protoField{}}
	fields := md.Fields()
	for _, ch := range paths[p].children {
		fd := fields.ByName(protoreflect.Name(paths[ch].name))
		if fd == nil {
			continue // a path the schema does not have: missing
		}
		f := &protoField{desc: fd, kind: fd.Kind(), slot: paths[ch].slot,
			implicit: !fd.HasPresence() && !fd.IsList() && !fd.IsMap()}
		if ed := fd.Enum(); ed != nil {
			f.enum = map[int32][]byte{}
			for i := range ed.Values().Len() {
				v := ed.Values().Get(i)
				if _, dup := f.enum[int32(v.Number())]; !dup { // allow_alias: the first name
					f.enum[int32(v.Number())] = []byte(v.Name())
				}
			}
			f.zero = []byte(ed.Values().Get(0).Name())
		}
		isMsg := fd.Message() != nil && !fd.IsList() && !fd.IsMap()
		f.instant = isMsg && fd.Message().FullName() == "google.protobuf.Timestamp"
		f.whole = f.slot >= 0 && !f.instant && (fd.IsList() || fd.IsMap() || isMsg)
		if isMsg && len(paths[ch].children) > 0 {
			f.msg = compileProto(fd.Message(), paths, ch)
		}
		if fd.Number() < maxSmallField {
			m.small[fd.Number()] = f
		} else {
			m.large[fd.Number()] = f
		}
		if f.slot >= 0 {
			m.wanted = append(m.wanted, f)
		}
	}
	return m
}

// protoWalker reads one Protobuf message body into out.
type protoWalker struct {
	out *binFields
}

func protoFail(detail string) error { return &DecodeError{Reason: ReasonBadPayload, Detail: detail} }

// message reads the message m in b.
func (w *protoWalker) message(m *protoMsg, b []byte, depth int) error {
	if depth >= maxDepth {
		return protoFail("nested too deeply")
	}
	whole := false
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return protoFail("a bad field tag: " + protowire.ParseError(n).Error())
		}
		rest = rest[n:]
		val := protowire.ConsumeFieldValue(num, typ, rest)
		if val < 0 {
			return protoFail("field " + strconv.Itoa(int(num)) + ": " + protowire.ParseError(val).Error())
		}
		f := m.field(num)
		v := rest[:val]
		rest = rest[val:]
		if f == nil {
			continue
		}
		if f.whole {
			whole = true
		}
		if err := w.field(f, typ, v, depth); err != nil {
			return err
		}
	}
	if whole {
		if err := w.renderWhole(m, b); err != nil {
			return err
		}
	}
	for _, f := range m.wanted {
		if tok := &w.out.slots[f.slot]; tok.kind == tokMissing && f.implicit {
			*tok = defaultToken(f)
		}
	}
	return nil
}

// field reads one occurrence of f (its wire type typ, its value v with the
// tag consumed).
func (w *protoWalker) field(f *protoField, typ protowire.Type, v []byte, depth int) error {
	fd := f.desc
	if f.msg != nil || f.instant {
		body, n := protowire.ConsumeBytes(v)
		if typ != protowire.BytesType || n < 0 {
			return protoFail("field " + string(fd.Name()) + " is not a message")
		}
		if f.instant {
			return w.timestamp(f, body)
		}
		return w.message(f.msg, body, depth+1)
	}
	if f.slot < 0 || f.whole {
		return nil
	}
	tok, err := w.scalar(f, typ, v)
	if err != nil {
		return err
	}
	w.out.slots[f.slot] = tok
	return nil
}

// timestamp reads a google.protobuf.Timestamp as an instant in ms.
func (w *protoWalker) timestamp(f *protoField, b []byte) error {
	var secs, nanos int64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protoFail("a bad Timestamp")
		}
		b = b[n:]
		val := protowire.ConsumeFieldValue(num, typ, b)
		if val < 0 {
			return protoFail("a bad Timestamp")
		}
		if typ == protowire.VarintType && (num == 1 || num == 2) {
			x, _ := protowire.ConsumeVarint(b)
			if num == 1 {
				secs = int64(x)
			} else {
				nanos = int64(int32(x))
			}
		}
		b = b[val:]
	}
	if secs > math.MaxInt64/1000-1 || secs < math.MinInt64/1000+1 {
		return protoFail("a Timestamp out of range")
	}
	if f.slot >= 0 {
		w.out.setInstant(f.slot, secs*1000+floorDiv(nanos, 1e6))
	}
	return nil
}

// scalar reads a scalar field's value v of wire type typ.
func (w *protoWalker) scalar(f *protoField, typ protowire.Type, v []byte) (token, error) {
	bad := func() (token, error) {
		return token{}, protoFail("field " + string(f.desc.Name()) + " has wire type " + strconv.Itoa(int(typ)) + ", not its schema's")
	}
	out := w.out
	switch f.kind {
	case protoreflect.StringKind, protoreflect.BytesKind:
		s, n := protowire.ConsumeBytes(v)
		if typ != protowire.BytesType || n < 0 {
			return bad()
		}
		return token{kind: tokString, text: s[:len(s):len(s)]}, nil
	case protoreflect.FloatKind:
		x, n := protowire.ConsumeFixed32(v)
		if typ != protowire.Fixed32Type || n < 0 {
			return bad()
		}
		return floatTok(out, float64(math.Float32frombits(x)), 32), nil
	case protoreflect.DoubleKind:
		x, n := protowire.ConsumeFixed64(v)
		if typ != protowire.Fixed64Type || n < 0 {
			return bad()
		}
		return floatTok(out, math.Float64frombits(x), 64), nil
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		x, n := protowire.ConsumeFixed32(v)
		if typ != protowire.Fixed32Type || n < 0 {
			return bad()
		}
		if f.kind == protoreflect.Sfixed32Kind {
			return token{kind: tokNumber, text: out.appendInt(int64(int32(x)))}, nil
		}
		return token{kind: tokNumber, text: out.appendInt(int64(x))}, nil
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		x, n := protowire.ConsumeFixed64(v)
		if typ != protowire.Fixed64Type || n < 0 {
			return bad()
		}
		if f.kind == protoreflect.Fixed64Kind {
			return token{kind: tokNumber, text: out.appendUint(x)}, nil
		}
		return token{kind: tokNumber, text: out.appendInt(int64(x))}, nil
	}
	x, n := protowire.ConsumeVarint(v)
	if typ != protowire.VarintType || n < 0 {
		return bad()
	}
	switch f.kind {
	case protoreflect.BoolKind:
		return token{kind: tokBool, text: boolText[min(x, 1)]}, nil
	case protoreflect.EnumKind:
		if name, ok := f.enum[int32(x)]; ok {
			return token{kind: tokString, text: name}, nil
		}
		return token{kind: tokNumber, text: out.appendInt(int64(int32(x)))}, nil // a value newer than the schema: its number
	case protoreflect.Int32Kind:
		return token{kind: tokNumber, text: out.appendInt(int64(int32(x)))}, nil
	case protoreflect.Sint32Kind:
		return token{kind: tokNumber, text: out.appendInt(int64(int32(protowire.DecodeZigZag(x & math.MaxUint32))))}, nil
	case protoreflect.Sint64Kind:
		return token{kind: tokNumber, text: out.appendInt(protowire.DecodeZigZag(x))}, nil
	case protoreflect.Uint32Kind:
		return token{kind: tokNumber, text: out.appendInt(int64(uint32(x)))}, nil
	case protoreflect.Uint64Kind:
		return token{kind: tokNumber, text: out.appendUint(x)}, nil
	}
	return token{kind: tokNumber, text: out.appendInt(int64(x))}, nil // int64
}

// floatTok is a float's token, as in Avro: its shortest text, or a string
// for NaN and infinities.
func floatTok(out *binFields, f float64, bitSize int) token {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return token{kind: tokString, text: out.appendText([]byte(strconv.FormatFloat(f, 'g', -1, 64)))}
	}
	start := len(out.buf)
	out.buf = strconv.AppendFloat(out.buf, f, 'g', -1, bitSize)
	return token{kind: tokNumber, text: out.buf[start:len(out.buf):len(out.buf)]}
}

// defaultToken is an unset proto3 scalar's value: zero, false, "" or the
// enum's first value.
func defaultToken(f *protoField) token {
	switch f.kind {
	case protoreflect.StringKind, protoreflect.BytesKind:
		return token{kind: tokString, text: []byte{}}
	case protoreflect.BoolKind:
		return token{kind: tokBool, text: boolText[0]}
	case protoreflect.EnumKind:
		return token{kind: tokString, text: f.zero}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return token{}
	}
	return token{kind: tokNumber, text: zeroText}
}

var zeroText = []byte("0")

// renderWhole renders the fields of m taken whole from a dynamic message.
func (w *protoWalker) renderWhole(m *protoMsg, b []byte) error {
	msg := dynamicpb.NewMessage(m.desc)
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, msg); err != nil {
		return protoFail(err.Error())
	}
	for _, f := range m.wanted {
		if !f.whole || !msg.Has(f.desc) {
			continue
		}
		start := len(w.out.buf)
		w.out.buf = appendProtoJSON(w.out.buf, f.desc, msg.Get(f.desc), 0)
		kind := tokObject
		if f.desc.IsList() {
			kind = tokArray
		}
		w.out.slots[f.slot] = token{kind: kind, text: w.out.buf[start:len(w.out.buf):len(w.out.buf)]}
	}
	return nil
}

// appendProtoJSON appends v, the value of field fd, as JSON: field names as
// in the .proto, enums as names, bytes as base64 (as protojson), 64-bit
// integers as numbers.
func appendProtoJSON(buf []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value, depth int) []byte {
	switch {
	case fd.IsList():
		buf = append(buf, '[')
		l := v.List()
		for i := range l.Len() {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendProtoScalar(buf, fd, l.Get(i), depth)
		}
		return append(buf, ']')
	case fd.IsMap():
		buf = append(buf, '{')
		first := true
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			if !first {
				buf = append(buf, ',')
			}
			first = false
			buf = append(AppendQuoted(buf, []byte(k.String())), ':')
			buf = appendProtoScalar(buf, fd.MapValue(), mv, depth)
			return true
		})
		return append(buf, '}')
	}
	return appendProtoScalar(buf, fd, v, depth)
}

func appendProtoScalar(buf []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value, depth int) []byte {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if depth >= maxDepth {
			return append(buf, "null"...)
		}
		buf = append(buf, '{')
		first := true
		v.Message().Range(func(f protoreflect.FieldDescriptor, fv protoreflect.Value) bool {
			if !first {
				buf = append(buf, ',')
			}
			first = false
			buf = append(AppendQuoted(buf, []byte(f.Name())), ':')
			buf = appendProtoJSON(buf, f, fv, depth+1)
			return true
		})
		return append(buf, '}')
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return AppendQuoted(buf, []byte(ev.Name()))
		}
		return strconv.AppendInt(buf, int64(v.Enum()), 10)
	case protoreflect.StringKind:
		return AppendQuoted(buf, []byte(v.String()))
	case protoreflect.BytesKind:
		return AppendQuoted(buf, []byte(base64.StdEncoding.EncodeToString(v.Bytes())))
	case protoreflect.BoolKind:
		return strconv.AppendBool(buf, v.Bool())
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return strconv.AppendQuote(buf, strconv.FormatFloat(f, 'g', -1, 64))
		}
		bits := 64
		if fd.Kind() == protoreflect.FloatKind {
			bits = 32
		}
		return strconv.AppendFloat(buf, f, 'g', -1, bits)
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(buf, v.Uint(), 10)
	}
	return strconv.AppendInt(buf, v.Int(), 10)
}
