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
	names    []string // the children's names, for a tight match loop
	slot     int      // index into jsonScanner.slots, or -1
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
	s.nodes[n].names = append(s.nodes[n].names, name)
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
	data := s.data
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return i, s.syntaxError(i, "a member name")
		}
		end, esc, err := s.str(i)
		if err != nil {
			return end, err
		}
		child := s.match(node, data[i+1:end-1], esc)
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return i, s.syntaxError(i, `":"`)
		}
		i = skipSpace(data, i+1)
		if i, err = s.member(i, child, depth+1); err != nil {
			return i, err
		}
		i = skipSpace(data, i)
		switch {
		case i >= len(data):
			return i, s.syntaxError(i, `"," or "}"`)
		case data[i] == '}':
			return i + 1, nil
		case data[i] != ',':
			return i, s.syntaxError(i, `"," or "}"`)
		}
		i = skipSpace(data, i+1)
	}
}

// match returns the child of node named name, or -1.
func (s *jsonScanner) match(node int, name []byte, esc bool) int {
	if node < 0 {
		return -1
	}
	n := &s.nodes[node]
	if len(n.names) == 0 {
		return -1
	}
	if esc {
		s.scratch = unescapeJSON(s.scratch[:0], name)
		name = s.scratch
	}
	if len(name) == 0 {
		return n.childNamed("")
	}
	for k, want := range n.names {
		if len(want) == len(name) && want[0] == name[0] && string(name) == want {
			return n.children[k]
		}
	}
	return -1
}

func (n *pathNode) childNamed(name string) int {
	for k, want := range n.names {
		if want == name {
			return n.children[k]
		}
	}
	return -1
}

// member scans the value at data[i] of a member that matched node (-1: no
// configured path goes through it).
func (s *jsonScanner) member(i, node, depth int) (int, error) {
	if node < 0 {
		end, _, err := s.value(i, depth)
		return end, err
	}
	n := &s.nodes[node]
	var end int
	var esc bool
	var err error
	if len(n.children) > 0 && i < len(s.data) && s.data[i] == '{' {
		end, err = s.object(i, node, depth)
	} else {
		end, esc, err = s.value(i, depth)
	}
	if err != nil || n.slot < 0 {
		return end, err
	}
	s.slots[n.slot] = s.tokenAt(i, end, esc)
	return end, nil
}

func (s *jsonScanner) tokenAt(start, end int, esc bool) token {
	text := s.data[start:end]
	switch text[0] {
	case '"':
		return token{kind: tokString, esc: esc, text: text[1 : len(text)-1]}
	case '{':
		return token{kind: tokObject, text: text}
	case '[':
		return token{kind: tokArray, text: text}
	case 't', 'f':
		return token{kind: tokBool, text: text}
	case 'n':
		return token{kind: tokNull, text: text}
	}
	return token{kind: tokNumber, text: text}
}

// value skips the value at data[i], checking its syntax. For a string it
// also reports whether it has escapes.
func (s *jsonScanner) value(i, depth int) (end int, esc bool, err error) {
	data := s.data
	if i >= len(data) {
		return i, false, s.syntaxError(i, "a value")
	}
	switch c := data[i]; {
	case c == '"':
		return s.str(i)
	case c == '{':
		end, err = s.object(i, -1, depth)
	case c == '[':
		end, err = s.array(i, depth)
	case c == 't':
		end, err = s.literal(i, "true")
	case c == 'f':
		end, err = s.literal(i, "false")
	case c == 'n':
		end, err = s.literal(i, "null")
	default:
		var ok bool
		if end, ok = scanNumber(data, i); !ok {
			err = s.syntaxError(end, "a value")
		}
	}
	return end, false, err
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
		end, _, err := s.value(i, depth+1)
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
// bytes above it), which is all nextSpecial uses.
func specialBytes(v uint64) uint64 {
	q := v ^ (lowBits * '"')
	b := v ^ (lowBits * '\\')
	return (((q - lowBits) &^ q) | ((b - lowBits) &^ b) | ((v - lowBits*0x20) &^ v)) & highBits
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
