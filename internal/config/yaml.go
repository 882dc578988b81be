package config

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// YAML returns c as a YAML document, for `aggregator validate`: every key
// that applies, defaults included, and none that does not, so Parse reads it
// back to the same Config. A password set inline is written "<redacted>";
// one read from password_file is left out, as the file is named.
func (c Config) YAML() []byte {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	// Encoding plain nodes into a bytes.Buffer cannot fail.
	_ = enc.Encode(c.node(reflect.ValueOf(c), ""))
	_ = enc.Close()
	return buf.Bytes()
}

// node encodes v, found at key path, as a YAML node.
func (c *Config) node(v reflect.Value, path string) *yaml.Node {
	if c.isRecords(path) {
		return scalar("!!int", strconv.FormatInt(time.Duration(v.Int()).Milliseconds(), 10))
	}
	if v.Type() == durationType {
		return scalar("!!str", formatDuration(time.Duration(v.Int())))
	}
	switch v.Kind() {
	case reflect.Struct:
		return c.mappingNode(v, path)
	case reflect.Slice:
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i := range v.Len() {
			seq.Content = append(seq.Content, c.node(v.Index(i), fmt.Sprintf("%s[%d]", path, i)))
		}
		if v.Type().Elem().Kind() == reflect.String || v.Len() == 0 {
			seq.Style = yaml.FlowStyle
		}
		return seq
	case reflect.Map:
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle}
		for _, k := range slices.Sorted(maps.Keys(v.Interface().(map[string]string))) {
			m.Content = append(m.Content, scalar("!!str", k), scalar("!!str", v.MapIndex(reflect.ValueOf(k)).String()))
		}
		return m
	case reflect.Bool:
		return scalar("!!bool", strconv.FormatBool(v.Bool()))
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
		return scalar("!!int", strconv.FormatInt(v.Int(), 10))
	case reflect.Float32, reflect.Float64:
		return scalar("!!float", strconv.FormatFloat(v.Float(), 'g', -1, v.Type().Bits()))
	}
	return scalar("!!str", v.String())
}

// mappingNode encodes the struct v, leaving out the keys that do not apply.
// List items (aggregates, filters) are written on one line each.
func (c *Config) mappingNode(v reflect.Value, path string) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if path != "" && path[len(path)-1] == ']' {
		m.Style = yaml.FlowStyle
	}
	for i := range v.NumField() {
		key := join(path, tagName(v.Type().Field(i)))
		value := c.node(v.Field(i), key)
		if c.inapplicable(key) != "" || c.hidden(key) {
			continue
		}
		if key == "source.sasl.password" || key == "source.schema_registry.password" || key == "source.sasl.oauth.client_secret" {
			value = scalar("!!str", "<redacted>")
		}
		m.Content = append(m.Content, scalar("!!str", tagName(v.Type().Field(i))), value)
	}
	return m
}

// hidden reports whether YAML leaves key out although it applies: the
// password when it is unset or was read from password_file, and an unset
// state.cutover (optional, with no default to show). The OAuth client
// secret likewise.
func (c *Config) hidden(key string) bool {
	sasl, sr := c.Source.SASL, c.Source.SchemaRegistry
	return key == "source.sasl.password" && (sasl.Password == "" || sasl.PasswordFile != "") ||
		key == "source.schema_registry.password" && sr.Password == "" ||
		key == "source.sasl.oauth.client_secret" && sasl.OAuth.ClientSecret == "" ||
		key == "state.cutover" && c.State.Cutover == ""
}

func scalar(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}
