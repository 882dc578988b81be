package record

import (
	"bytes"
	"errors"
	"net/url"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// JSON Schema values are checked against their schema with
// github.com/santhosh-tekuri/jsonschema (drafts 4 to 2020-12). The check
// needs the whole body as a generic value, so unlike the decoder it
// allocates per record.

// jsonSchemaBase is where the registry's documents are placed, so that a
// relative $ref (a reference's name) resolves among them and nowhere else.
const jsonSchemaBase = "https://registry.invalid/"

// parseJSONSchema compiles sch with its references, which it may $ref by
// their names. Nothing is loaded from files or the network.
func parseJSONSchema(sch Schema) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no loader: only the documents added here
	var add func(name, text string, refs []Reference, depth int) error
	add = func(name, text string, refs []Reference, depth int) error {
		if depth > maxRefDepth {
			return errors.New("references nested too deeply")
		}
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			return err
		}
		if err := c.AddResource(jsonSchemaURL(name), doc); err != nil {
			return err
		}
		for _, r := range refs {
			if err := add(r.Name, r.Schema.Text, r.Schema.References, depth+1); err != nil {
				return errors.New("reference " + r.Name + ": " + err.Error())
			}
		}
		return nil
	}
	const main = "registry-schema.json"
	if err := add(main, sch.Text, sch.References, 0); err != nil {
		return nil, err
	}
	return c.Compile(jsonSchemaURL(main))
}

// jsonSchemaURL places a document name under jsonSchemaBase unless it is
// an absolute URL.
func jsonSchemaURL(name string) string {
	if u, err := url.Parse(name); err == nil && u.IsAbs() {
		return name
	}
	return jsonSchemaBase + strings.TrimPrefix(name, "/")
}

// validateJSON checks a JSON body (already scanned: it is valid JSON)
// against its schema.
func validateJSON(sch *jsonschema.Schema, body []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err == nil {
		err = sch.Validate(v)
	}
	if err == nil {
		return nil
	}
	detail, _, _ := strings.Cut(err.Error(), "\n")
	return &DecodeError{Reason: ReasonBadPayload, Detail: "does not match its JSON Schema: " + truncate(detail)}
}
