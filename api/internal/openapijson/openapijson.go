// Package openapijson turns the YAML document into its JSON form at build
// time (api/gen_json.go) and in the test that keeps api/openapi.json
// current. It is never linked into the binary.
package openapijson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v4"
)

// FromYAML converts a YAML document (one JSON-compatible value: mappings
// with scalar keys, sequences, strings, numbers, booleans, null) to
// compact JSON (what GET /openapi.json serves) ending in a newline, mapping
// keys in the document's order.
// Anchors and aliases are refused: the API document has none, and JSON has
// no equivalent.
func FromYAML(y []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(y, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("want one YAML document")
	}
	var b bytes.Buffer
	if err := write(&b, doc.Content[0]); err != nil {
		return nil, err
	}
	if !json.Valid(b.Bytes()) {
		return nil, fmt.Errorf("generated JSON is invalid")
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

func write(b *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: a mapping key that is not a scalar", k.Line)
			}
			if k.Value == "<<" && k.Tag == "!!merge" {
				return fmt.Errorf("line %d: merge keys are not supported", k.Line)
			}
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeString(b, k.Value); err != nil {
				return err
			}
			b.WriteByte(':')
			if err := write(b, v); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, v := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := write(b, v); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str", "!!binary", "!!timestamp":
			return writeString(b, n.Value)
		case "!!null":
			b.WriteString("null")
		case "!!bool":
			var v bool
			if err := n.Decode(&v); err != nil {
				return fmt.Errorf("line %d: %w", n.Line, err)
			}
			b.WriteString(strconv.FormatBool(v))
		case "!!int", "!!float":
			var v any
			if err := n.Decode(&v); err != nil {
				return fmt.Errorf("line %d: %w", n.Line, err)
			}
			j, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("line %d: %w", n.Line, err)
			}
			b.Write(j)
		default:
			return fmt.Errorf("line %d: unsupported tag %s", n.Line, n.ShortTag())
		}
	case yaml.AliasNode:
		return fmt.Errorf("line %d: aliases are not supported", n.Line)
	default:
		return fmt.Errorf("line %d: unsupported YAML node", n.Line)
	}
	return nil
}

// writeString writes s as a JSON string, without escaping <, > and & (the
// document is no HTML).
func writeString(b *bytes.Buffer, s string) error {
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	if err := e.Encode(s); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}
