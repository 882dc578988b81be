// Command schemagen vendors Kubernetes API definitions into the chart's
// values.schema.json, so that the Kubernetes blocks of the values
// (resources, probes, affinity, security contexts, ...) are checked
// against the API at `helm install` and `helm lint`, offline: a typo such
// as resources.request fails instead of being dropped by the API server.
//
//	go mod download k8s.io/kubernetes@v1.37.2
//	go run ./schemagen -swagger "$(go env GOMODCACHE)/k8s.io/kubernetes@v1.37.2/api/openapi-spec/swagger.json" aggregator/values.schema.json
//
// It replaces the schema's $defs named io.k8s.* with the definitions the
// schema refers to and everything they refer to, made strict
// (additionalProperties false wherever the API lists the properties, as
// `kubectl apply --validate=strict` is) and without descriptions. Quantity
// takes a string or a number, IntOrString an integer or a string, as YAML
// writes them.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

const (
	swaggerRef = "#/definitions/"
	schemaRef  = "#/$defs/"
	k8sPrefix  = "io.k8s."
)

func main() {
	swagger := flag.String("swagger", "", "Kubernetes `swagger.json` (api/openapi-spec in k8s.io/kubernetes)")
	flag.Parse()
	if *swagger == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: schemagen -swagger swagger.json values.schema.json")
		os.Exit(2)
	}
	if err := run(*swagger, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func run(swaggerPath, schemaPath string) error {
	var api struct {
		Definitions map[string]any `json:"definitions"`
	}
	if err := readJSON(swaggerPath, &api); err != nil {
		return err
	}
	top, err := readTop(schemaPath)
	if err != nil {
		return err
	}
	defs := map[string]any{}
	var todo []string // the roots: what the rest of the schema refers to
	for _, kv := range top {
		var v any
		if err := json.Unmarshal(kv.value, &v); err != nil {
			return fmt.Errorf("%s: %s: %w", schemaPath, kv.key, err)
		}
		if kv.key == "$defs" {
			defs = v.(map[string]any)
			maps.DeleteFunc(defs, func(name string, _ any) bool { return strings.HasPrefix(name, k8sPrefix) })
			for _, d := range defs {
				todo = append(todo, refs(d)...)
			}
			continue
		}
		todo = append(todo, refs(v)...)
	}
	for len(todo) > 0 {
		name := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if _, done := defs[name]; done || !strings.HasPrefix(name, k8sPrefix) {
			continue
		}
		def, ok := api.Definitions[name]
		if !ok {
			return fmt.Errorf("%s: no definition %s", swaggerPath, name)
		}
		strict := convert(name, def)
		defs[name] = strict
		todo = append(todo, refs(strict)...)
	}
	// The file keeps its order and layout; only $defs is written anew.
	var out bytes.Buffer
	out.WriteString("{\n")
	for i, kv := range top {
		value := kv.value
		if kv.key == "$defs" {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			enc.SetIndent("  ", "  ")
			if err := enc.Encode(defs); err != nil {
				return err
			}
			value = bytes.TrimSpace(b.Bytes())
		}
		fmt.Fprintf(&out, "  %q: %s", kv.key, value)
		if i < len(top)-1 {
			out.WriteString(",")
		}
		out.WriteString("\n")
	}
	out.WriteString("}\n")
	return os.WriteFile(schemaPath, out.Bytes(), 0o644)
}

// member is one top-level key of the schema, its value as written.
type member struct {
	key   string
	value json.RawMessage
}

// readTop reads the top-level members of a JSON object file, in order.
func readTop(path string) ([]member, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("%s: not a JSON object", path)
	}
	var top []member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var m member
		m.key = t.(string)
		if err := dec.Decode(&m.value); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, m.key, err)
		}
		top = append(top, m)
	}
	return top, nil
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// refs returns the definitions v refers to, by name.
func refs(v any) []string {
	var names []string
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok {
			names = append(names, strings.TrimPrefix(ref, schemaRef))
		}
		for _, k := range slices.Sorted(maps.Keys(v)) {
			names = append(names, refs(v[k])...)
		}
	case []any:
		for _, e := range v {
			names = append(names, refs(e)...)
		}
	}
	return names
}

// convert makes one API definition a strict JSON Schema definition.
func convert(name string, def any) any {
	switch name {
	case "io.k8s.apimachinery.pkg.util.intstr.IntOrString":
		return map[string]any{"type": []any{"integer", "string"}}
	case "io.k8s.apimachinery.pkg.api.resource.Quantity":
		return map[string]any{"type": []any{"string", "number"}}
	}
	return strict(def)
}

func strict(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			switch {
			case k == "description", k == "format", strings.HasPrefix(k, "x-kubernetes-"):
			case k == "$ref":
				out[k] = schemaRef + strings.TrimPrefix(e.(string), swaggerRef)
			case k == "properties":
				props := map[string]any{}
				for p, s := range e.(map[string]any) {
					props[p] = strict(s)
				}
				out[k] = props
			default:
				out[k] = strict(e)
			}
		}
		if _, ok := out["properties"]; ok && out["additionalProperties"] == nil {
			out["additionalProperties"] = false
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = strict(e)
		}
		return out
	}
	return v
}
