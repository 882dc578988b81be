package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

var durationType = reflect.TypeFor[time.Duration]()

// sources remembers how each key path ("window.size", "source.key[1]") was
// set, so that validation can tell present keys from defaults and errors
// can quote the value as written and name its environment variable.
type sources struct {
	present map[string]bool
	text    map[string]string // the value as written, for scalars
	env     map[string]string // the environment variable, for overrides
	// more are the errors found beside the one a check returns (every
	// unknown key, every aggregate's first problem): validate names them
	// all.
	more []*KeyError
}

func newSources() *sources {
	return &sources{present: map[string]bool{}, text: map[string]string{}, env: map[string]string{}}
}

// annotate fills each *KeyError in err with the value as written and its
// variable, and keeps secrets out of it.
func (s *sources) annotate(err error) error {
	if errs, ok := err.(Errors); ok {
		for _, e := range errs {
			s.annotate(e)
		}
		return err
	}
	var ke *KeyError
	if !errors.As(err, &ke) {
		return err
	}
	if text, ok := s.text[ke.Key]; ok {
		ke.Value = text
	}
	if ke.Env == "" {
		ke.Env = s.env[ke.Key]
	}
	ke.Value = redact(ke.Key, ke.Value)
	return err
}

// redact hides the value of keys that look like secrets.
func redact(key, value string) string {
	last := key[strings.LastIndex(key, ".")+1:]
	secret := strings.Contains(last, "pass") || strings.Contains(last, "secret") || strings.Contains(last, "token")
	if secret && value != "" && !strings.HasSuffix(last, "_file") {
		return "<redacted>"
	}
	return value
}

// decodeYAML sets the keys present in data on c, which holds the defaults.
// It walks the YAML node tree itself rather than decoding with
// KnownFields(true), to name every key by its full path, record which keys
// are present, and parse durations our way.
func (s *sources) decodeYAML(data []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		if line, col, ok := indentTab(data); ok {
			// yaml.v3 says only "found character that cannot start any token".
			return fmt.Errorf("%w: line %d, column %d: tabs are not allowed in YAML indentation; indent with spaces", ErrInvalid, line, col)
		}
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: want one YAML document, found more", ErrInvalid)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = resolve(root.Content[0])
	}
	if isNull(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("%w: the top level must be a mapping of keys (source:, window:, ...)", ErrInvalid)
	}
	return s.mapping(root, reflect.ValueOf(c).Elem(), "")
}

// indentTab returns the line and column (from 1) of the first tab in the
// leading whitespace of a line, where YAML forbids them.
func indentTab(data []byte) (line, col int, ok bool) {
	for i, l := range bytes.Split(data, []byte("\n")) {
		indent := len(l) - len(bytes.TrimLeft(l, " \t"))
		if j := bytes.IndexByte(l[:indent], '\t'); j >= 0 {
			return i + 1, j + 1, true
		}
	}
	return 0, 0, false
}

// mapping decodes a YAML mapping into the struct v.
func (s *sources) mapping(n *yaml.Node, v reflect.Value, path string) error {
	fields := fieldIndex(v.Type())
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := resolve(n.Content[i]), n.Content[i+1]
		key := join(path, kn.Value)
		switch idx, known := fields[kn.Value]; {
		case kn.Kind != yaml.ScalarNode:
			return &KeyError{Key: join(path, nodeText(kn)), Value: nodeText(vn), Reason: "a key must be a plain name"}
		case seen[kn.Value]:
			return &KeyError{Key: key, Value: nodeText(vn), Reason: "duplicate key"}
		case !known: // named with the rest: the keys around it are still read
			s.more = append(s.more, &KeyError{Key: key, Value: nodeText(vn), Reason: unknownKey(path, kn.Value, fields)})
		default:
			seen[kn.Value] = true
			if err := s.value(vn, v.Field(idx), key); err != nil {
				return err
			}
		}
	}
	return nil
}

// value decodes the YAML node n into v. A null leaves v as it is, so an
// empty `window:` keeps the defaults.
func (s *sources) value(n *yaml.Node, v reflect.Value, path string) error {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	s.present[path] = true
	switch {
	case v.Type() != durationType && v.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return &KeyError{Key: path, Value: nodeText(n), Reason: "must be a mapping of keys"}
		}
		return s.mapping(n, v, path)
	case v.Kind() == reflect.Slice:
		return s.sequence(n, v, path)
	case v.Kind() == reflect.Map:
		return s.stringMap(n, v, path)
	case n.Kind != yaml.ScalarNode:
		return &KeyError{Key: path, Value: nodeText(n), Reason: "must be a single value, not a list or mapping"}
	}
	s.text[path] = n.Value
	if reason := setText(v, n.Value); reason != "" && !setRecords(v, path, n.Value) {
		return &KeyError{Key: path, Value: n.Value, Reason: reason}
	}
	return nil
}

// sequence decodes a YAML sequence into the slice v.
func (s *sources) sequence(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.SequenceNode {
		return &KeyError{Key: path, Value: nodeText(n), Reason: "must be a list, such as [a, b]"}
	}
	list := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		if err := s.value(item, list.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	v.Set(list)
	return nil
}

// stringMap decodes a YAML mapping of plain names to single values into
// the map[string]string v (source.sasl.oauth.extensions).
func (s *sources) stringMap(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		return &KeyError{Key: path, Value: nodeText(n), Reason: "must be a mapping of names to values, such as {a: b}"}
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := resolve(n.Content[i]), resolve(n.Content[i+1])
		key := join(path, kn.Value)
		switch {
		case kn.Kind != yaml.ScalarNode:
			return &KeyError{Key: join(path, nodeText(kn)), Value: nodeText(vn), Reason: "a name must be a plain name"}
		case m.MapIndex(reflect.ValueOf(kn.Value)).IsValid():
			return &KeyError{Key: key, Value: nodeText(vn), Reason: "duplicate key"}
		case vn.Kind != yaml.ScalarNode || isNull(vn):
			return &KeyError{Key: key, Value: nodeText(vn), Reason: "must be a single value"}
		}
		m.SetMapIndex(reflect.ValueOf(kn.Value), reflect.ValueOf(vn.Value))
	}
	if m.Len() > 0 { // {} is the default, nil
		v.Set(m)
	}
	return nil
}

// setText parses text into the scalar v, the same way for the file and the
// environment (quoting in YAML never matters). It returns why text does not
// fit, or "".
func setText(v reflect.Value, text string) string {
	if v.Type() == durationType {
		d, reason := parseDuration(text)
		if reason == "" {
			v.SetInt(int64(d))
		}
		return reason
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(text)
	case reflect.Bool:
		b, err := strconv.ParseBool(text)
		if err != nil {
			return "must be true or false"
		}
		v.SetBool(b)
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
		i, err := strconv.ParseInt(text, 10, v.Type().Bits())
		if err != nil {
			return fmt.Sprintf("must be a whole number that fits in %d bits", v.Type().Bits())
		}
		v.SetInt(i)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(text, v.Type().Bits())
		if err != nil {
			return "must be a number"
		}
		v.SetFloat(f)
	default:
		return "cannot be set" // unreachable for Config's field types
	}
	return ""
}

// parseDuration parses Go duration syntax ("0", "500ms", "1s250ms", "1h")
// and requires whole milliseconds, the engine's unit.
func parseDuration(text string) (time.Duration, string) {
	d, err := time.ParseDuration(text)
	if err != nil {
		return 0, "must be a duration such as 0, 500ms, 1s250ms or 1h"
	}
	if d%time.Millisecond != 0 {
		return 0, "must be a whole number of milliseconds"
	}
	return d, ""
}

// fieldIndex maps the yaml tag names of struct type t to field indexes.
func fieldIndex(t reflect.Type) map[string]int {
	idx := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		idx[tagName(t.Field(i))] = i
	}
	return idx
}

func tagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// nodeText is n's value for an error message.
func nodeText(n *yaml.Node) string {
	switch resolve(n).Kind {
	case yaml.MappingNode:
		return "{...}"
	case yaml.SequenceNode:
		return "[...]"
	}
	return n.Value
}

// unknownKey explains an unknown key, suggesting a known one that is
// within two edits of it.
func unknownKey(path, key string, fields map[string]int) string {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if editDistance(key, name) <= 2 {
			return fmt.Sprintf("unknown key (did you mean %s?)", join(path, name))
		}
	}
	return "unknown key; known keys here: " + strings.Join(names, ", ")
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := range len(a) {
		cur[0] = i + 1
		for j := range len(b) {
			cost := 1
			if a[i] == b[j] {
				cost = 0
			}
			cur[j+1] = min(prev[j+1]+1, cur[j]+1, prev[j]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
