// Package api holds the published contract of the HTTP API: the OpenAPI 3.0
// document api/openapi.yaml, embedded, as bytes (YAML and JSON) and parsed.
// The server serves it (GET /openapi.yaml, /openapi.json), tests check every
// route and every response against it, and the Go client (package client)
// covers every operation in it.
package api

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
)

//go:embed openapi.yaml
var yamlDoc []byte

// YAML returns the document as written (a copy).
func YAML() []byte { return append([]byte(nil), yamlDoc...) }

var (
	loadOnce sync.Once
	jsonDoc  []byte
	loadErr  error
)

func load() {
	l := openapi3.NewLoader()
	doc, err := l.LoadFromData(yamlDoc)
	if err != nil {
		loadErr = fmt.Errorf("api: parse openapi.yaml: %w", err)
		return
	}
	b, err := json.Marshal(doc)
	if err != nil {
		loadErr = fmt.Errorf("api: encode openapi.yaml as JSON: %w", err)
		return
	}
	jsonDoc = b
}

// JSON returns the document encoded as JSON.
func JSON() ([]byte, error) {
	loadOnce.Do(load)
	if loadErr != nil {
		return nil, loadErr
	}
	return append([]byte(nil), jsonDoc...), nil
}

// Load parses the document. Each call returns a fresh *openapi3.T, so
// callers may modify it (a test setting Servers, for instance).
func Load() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(yamlDoc)
	if err != nil {
		return nil, fmt.Errorf("api: parse openapi.yaml: %w", err)
	}
	return doc, nil
}

// Validate parses the document and validates it against the OpenAPI 3.0
// specification, examples included.
func Validate(ctx context.Context) error {
	doc, err := Load()
	if err != nil {
		return err
	}
	return doc.Validate(ctx, openapi3.EnableExamplesValidation())
}
