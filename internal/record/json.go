package record

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds the nesting of JSON values, so a hostile record cannot
// exhaust the stack.
const maxDepth = 1000

// tokenKind is the type of a field found in a record.
type tokenKind uint8

const (
	tokMissing tokenKind = iota
	tokNull
	tokString // text is the content; esc says it still has escapes
	tokNumber // text is the literal
	tokBool   // text is true or false
	tokObject // text is the JSON text
	tokArray  // text is the JSON text
)

// token is one field of the record being decoded; text points into the
// record value (or the Kafka key).
type token struct {
	kind tokenKind
	esc  bool // tokString: content has escapes (JSON \x, or CSV "")
	text []byte
}

// pathNode is one step of the configured JSON paths: the members wanted
// below an object, as a small trie. Node 0 is the top-level object.
type pathNode struct {
	name     string
	children []int
	want     []wantedName // the children, for a tight match loop
	slot     int          // index into jsonScanner.slots, or -1
}

// wantedName is a child of a pathNode, ready to be matched: prefix holds
// the first eight bytes of its name, zero-padded, so that one comparison
// of words mostly decides.
type wantedName struct {
	prefix uint64
	name   string
	node   int
	short  bool   // the name has up to eight bytes and is plain (JSON has it as it is)
	mask   uint64 // with short: the bytes of a word that the name covers
}

func newWantedName(name string, node int) wantedName {
	w := wantedName{prefix: namePrefix([]byte(name)), name: name, node: node}
	if len(name) <= 8 && nextSpecial([]byte(name), 0) == len(name) {
		w.short, w.mask = true, 1<<(8*len(name))-1 // all ones for 8
	}
	return w
}

// jsonScanner finds the configured paths in one pass over a JSON object,
// validating the syntax of everything it skips.
type jsonScanner struct {
	nodes   []pathNode
	slots   []token
	data    []byte
	scratch []byte // unescaped member names
}

// addPath registers a dotted path and returns its slot.
func (s *jsonScanner) addPath(path string) int {
	if len(s.nodes) == 0 {
		s.nodes = append(s.nodes, pathNode{slot: -1})
	}
	n := 0
	for name := range strings.SplitSeq(path, ".") {
		n = s.child(n, name)
	}
	if s.nodes[n].slot < 0 {
		s.nodes[n].slot = len(s.slots)
		s.slots = append(s.slots, token{})
	}
	return s.nodes[n].slot
}

func (s *jsonScanner) child(n int, name string) int {
	for _, c := range s.nodes[n].children {
		if s.nodes[c].name == name {
			return c
		}
	}
	s.nodes = append(s.nodes, pathNode{name: name, slot: -1})
	c := len(s.nodes) - 1
	s.nodes[n].children = append(s.nodes[n].children, c)
	s.nodes[n].want = append(s.nodes[n].want, newWantedName(name, c))
	return c
}

// scan finds the configured paths in data, which must be one JSON object.
// Duplicate member names: the last one wins, as in encoding/json.
func (s *jsonScanner) scan(data []byte) error {
	if len(s.nodes) == 0 {
		s.nodes = append(s.nodes, pathNode{slot: -1})
	}
	for i := range s.slots {
		s.slots[i] = token{}
	}
	s.data = data
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return s.syntaxError(i, "a JSON object")
	}
	i, err := s.object(i, 0, 0)
	if err != nil {
		return err
	}
	if i = skipSpace(data, i); i < len(data) {
		return s.syntaxError(i, "end of input")
	}
	return nil
}

// object scans the object at data[i] (a '{'), looking for node's children
// (node -1: none, the object is skipped).
// It returns the index after the closing brace.
func (s *jsonScanner) object(i, node, depth int) (int, error) {
	if depth >= maxDepth {
		return i, &DecodeError{Reason: ReasonBadJSON, Detail: "nested too deeply at offset " + strconv.Itoa(i)}
	}
	var want []wantedName
	if node >= 0 {
		want = s.nodes[node].want
	}
	data := s.data
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return i, s.syntaxError(i, "a member name")
		}
		child, end := -1, 0
		if i+10 <= len(data) { // the name's first word and the byte after it
			// Most names are plain and short. The first word of the name
			// is compared with each short wanted name and the byte after
			// it with '"': unlike the search for the closing quote, this
			// does not hold up the rest of the scan, which depends on
			// where the name ends. Another name shorter than eight bytes
			// has its closing quote in the word.
			w := binary.LittleEndian.Uint64(data[i+1:])
			for k := range want {
				if c := &want[k]; c.short && w&c.mask == c.prefix && data[i+1+len(c.name)] == '"' {
					child, end = c.node, i+2+len(c.name)
					break
				}
			}
			if n := bits.TrailingZeros64(specialBytes(w)) >> 3; end == 0 && n < 8 && data[i+1+n] == '"' {
				end = i + n + 2
			}
		}
		if end == 0 {
			var esc bool
			var err error
			if end, esc, err = s.str(i); err != nil {
				return end, err
			}
			if len(want) > 0 {
				child = s.match(want, i+1, end-1, esc)
			}
		}
		i = end
		if i < len(data) && data[i] == ':' {
			i++
		} else {
			i = skipSpace(data, i)
			if i >= len(data) || data[i] != ':' {
				return i, s.syntaxError(i, `":"`)
			}
			i++
		}
		// Strings and numbers, the usual values, are scanned here as
		// member would, saving a call.
		i = skipSpace(data, i)
		var c byte
		if i < len(data) {
			c = data[i]
		}
		var err error
		switch start := i; {
		case c == '"':
			var esc bool
			if i, esc, err = s.str(i); err != nil {
				return i, err
			}
			if child >= 0 {
				s.keep(child, token{kind: tokString, esc: esc, text: data[start+1 : i-1]})
			}
		case c >= '0' && c <= '9' || c == '-':
			var ok bool
			if i, ok = scanNumber(data, i); !ok {
				return i, s.syntaxError(i, "a value")
			}
			if child >= 0 {
				s.keep(child, token{kind: tokNumber, text: data[start:i]})
			}
		default:
			if i, err = s.member(i, child, depth+1); err != nil {
				return i, err
			}
		}
		if i < len(data) && data[i] == ',' {
			i++
		} else {
			i = skipSpace(data, i)
			switch {
			case i >= len(data):
				return i, s.syntaxError(i, `"," or "}"`)
			case data[i] == '}':
				return i + 1, nil
			case data[i] != ',':
				return i, s.syntaxError(i, `"," or "}"`)
			}
			i++
		}
		i = skipSpace(data, i)
	}
}

// match returns the node of the wanted name that the member name
// data[start:end] (esc: with escapes) is, or -1.
func (s *jsonScanner) match(want []wantedName, start, end int, esc bool) int {
	name := s.data[start:end]
	if esc {
		s.scratch = unescapeJSON(s.scratch[:0], name)
		name = s.scratch
	}
	prefix := namePrefix(name)
	for k := range want {
		w := &want[k]
		if w.prefix == prefix && len(w.name) == len(name) && (len(name) <= 8 || string(name[8:]) == w.name[8:]) {
			return w.node
		}
	}
	return -1
}

// namePrefix returns the first eight bytes of name as a little-endian
// word, zero-padded.
func namePrefix(name []byte) uint64 {
	if len(name) >= 8 {
		return binary.LittleEndian.Uint64(name)
	}
	var w uint64
	for k := len(name) - 1; k >= 0; k-- {
		w = w<<8 | uint64(name[k])
	}
	return w
}

// keep puts tok in node's slot, if it has one.
func (s *jsonScanner) keep(node int, tok token) {
	if slot := s.nodes[node].slot; slot >= 0 {
		s.slots[slot] = tok
	}
}

// member scans the value at data[i] of a member whose name matched node
// (-1: no configured path goes through it), checking its syntax, and keeps
// it in the node's slot. It returns the index after the value.
func (s *jsonScanner) member(i, node, depth int) (int, error) {
	data := s.data
	if i >= len(data) {
		return i, s.syntaxError(i, "a value")
	}
	slot, nested := -1, -1
	if node >= 0 {
		n := &s.nodes[node]
		slot = n.slot
		if len(n.children) > 0 {
			nested = node
		}
	}
	var kind tokenKind
	var end int
	var err error
	switch c := data[i]; {
	case c == '"':
		var esc bool
		if end, esc, err = s.str(i); err == nil && slot >= 0 {
			s.slots[slot] = token{kind: tokString, esc: esc, text: data[i+1 : end-1]}
		}
		return end, err
	case c >= '0' && c <= '9' || c == '-':
		var ok bool
		if end, ok = scanNumber(data, i); !ok {
			return end, s.syntaxError(end, "a value")
		}
		kind = tokNumber
	case c == '{':
		end, err = s.object(i, nested, depth)
		kind = tokObject
	case c == '[':
		end, err = s.array(i, depth)
		kind = tokArray
	case c == 't':
		end, err = s.literal(i, "true")
		kind = tokBool
	case c == 'f':
		end, err = s.literal(i, "false")
		kind = tokBool
	case c == 'n':
		end, err = s.literal(i, "null")
		kind = tokNull
	default:
		return i, s.syntaxError(i, "a value")
	}
	if err == nil && slot >= 0 {
		s.slots[slot] = token{kind: kind, text: data[i:end]}
	}
	return end, err
}

func (s *jsonScanner) array(i, depth int) (int, error) {
	if depth >= maxDepth {
		return i, &DecodeError{Reason: ReasonBadJSON, Detail: "nested too deeply at offset " + strconv.Itoa(i)}
	}
	data := s.data
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return i + 1, nil
	}
	for {
		end, err := s.member(i, -1, depth+1)
		if err != nil {
			return end, err
		}
		i = skipSpace(data, end)
		switch {
		case i >= len(data):
			return i, s.syntaxError(i, `"," or "]"`)
		case data[i] == ']':
			return i + 1, nil
		case data[i] != ',':
			return i, s.syntaxError(i, `"," or "]"`)
		}
		i = skipSpace(data, i+1)
	}
}

func (s *jsonScanner) literal(i int, lit string) (int, error) {
	if len(s.data)-i < len(lit) || string(s.data[i:i+len(lit)]) != lit {
		return i, s.syntaxError(i, "a value")
	}
	return i + len(lit), nil
}

// str skips the string at data[i] (a '"') and returns the index after its
// closing quote and whether it has escapes. Runs of ordinary bytes are
// skipped eight at a time.
func (s *jsonScanner) str(i int) (end int, esc bool, err error) {
	data := s.data
	for i++; ; {
		i = nextSpecial(data, i)
		if i >= len(data) {
			return i, esc, s.syntaxError(i, `"`)
		}
		switch c := data[i]; {
		case c == '"':
			return i + 1, esc, nil
		case c == '\\':
			esc = true
			n := escapeLen(data[i:])
			if n == 0 {
				return i, esc, s.syntaxError(i, "a valid escape")
			}
			i += n
		default:
			return i, esc, s.syntaxError(i, "no control character in a string")
		}
	}
}

// Byte masks for the word-at-a-time string scan.
const (
	lowBits  = 0x0101010101010101
	highBits = 0x8080808080808080
)

// nextSpecial returns the index of the first byte at or after data[i] that
// ends a run of plain string content: '"', '\\' or a control character; or
// len(data).
func nextSpecial(data []byte, i int) int {
	for ; i+8 <= len(data); i += 8 {
		if m := specialBytes(binary.LittleEndian.Uint64(data[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(data); i++ {
		if c := data[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}

// specialBytes flags (in the high bit of each byte) the bytes of v that are
// '"', '\\' or below 0x20. Only the lowest flag is exact (a borrow may flag
// bytes above it), which is all nextSpecial uses. For a byte below 0x80, each
// difference has its high bit set exactly when the byte is special; bytes
// from 0x80 up are masked by &^ v (and never borrow).
func specialBytes(v uint64) uint64 {
	q := v ^ (lowBits * '"')
	b := v ^ (lowBits * '\\')
	return ((q - lowBits) | (b - lowBits) | (v - lowBits*0x20)) &^ v & highBits
}

// escapeLen returns the length of the escape sequence at the start of s
// (which starts with a backslash), or 0 when it is not valid JSON.
func escapeLen(s []byte) int {
	if len(s) < 2 {
		return 0
	}
	switch s[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if len(s) < 6 {
			return 0
		}
		for _, c := range s[2:6] {
			if hexVal(c) < 0 {
				return 0
			}
		}
		return 6
	}
	return 0
}

func hexVal(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

func (s *jsonScanner) syntaxError(i int, want string) error {
	if i >= len(s.data) {
		return &DecodeError{Reason: ReasonBadJSON, Detail: "unexpected end of input, want " + want}
	}
	return &DecodeError{Reason: ReasonBadJSON, Detail: "unexpected " + strconv.QuoteRune(rune(s.data[i])) +
		" at offset " + strconv.Itoa(i) + ", want " + want}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && data[i] <= ' ' && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t') {
		i++
	}
	return i
}

// unescapeJSON appends the content of a JSON string (without its quotes,
// already validated) to dst with its escapes resolved. Unpaired surrogates
// become U+FFFD, as in encoding/json.
func unescapeJSON(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		switch s[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(s[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if len(s)-i >= 6 && s[i] == '\\' && s[i+1] == 'u' {
					r2 = hex4(s[i+2:])
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					r = dec
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // " \ /
			dst = append(dst, s[i+1])
		}
		i += 2
	}
	return dst
}

func hex4(s []byte) rune {
	return hexVal(s[0])<<12 | hexVal(s[1])<<8 | hexVal(s[2])<<4 | hexVal(s[3])
}

// AppendQuoted appends s as a JSON string. Only '"', '\' and control
// characters are escaped, so a JSON string literal without escapes comes
// out exactly as it went in. Invalid UTF-8 becomes U+FFFD.
func AppendQuoted(dst []byte, s []byte) []byte {
	dst = append(dst, '"')
	if plainASCII(s) {
		dst = append(dst, s...)
		return append(dst, '"')
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && n == 1 {
				dst = append(dst, "\ufffd"...)
			} else {
				dst = append(dst, s[i:i+n]...)
			}
			i += n
			continue
		}
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, `\u00`...)
			dst = append(dst, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
		default:
			dst = append(dst, c)
		}
		i++
	}
	return append(dst, '"')
}

// quotesAsIs reports whether AppendQuoted copies s unchanged: s has no
// quote, backslash or control character, and is valid UTF-8.
func quotesAsIs(s []byte) bool {
	return plainASCII(s) || nextSpecial(s, 0) == len(s) && utf8.Valid(s)
}

// isASCII reports whether s has no byte above 0x7f. Up to 16 bytes take
// two overlapping loads.
func isASCII(s []byte) bool {
	n := len(s)
	switch {
	case n >= 8:
		acc := binary.LittleEndian.Uint64(s[n-8:])
		for i := 0; i+8 <= n; i += 8 {
			acc |= binary.LittleEndian.Uint64(s[i:])
		}
		return acc&highBits == 0
	case n >= 4:
		acc := uint64(binary.LittleEndian.Uint32(s)) | uint64(binary.LittleEndian.Uint32(s[n-4:]))<<32
		return acc&highBits == 0
	}
	for _, c := range s {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// plainASCII reports whether s is ASCII with nothing to escape in a JSON
// string, so that AppendQuoted can copy it as it is.
func plainASCII(s []byte) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		v := binary.LittleEndian.Uint64(s[i:])
		if specialBytes(v)|(v&highBits) != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
