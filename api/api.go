// Package api holds the published contract of the HTTP API: the OpenAPI 3.0
// document api/openapi.yaml and its JSON form api/openapi.json, embedded, as
// bytes. The server serves them (GET /openapi.yaml, /openapi.json), tests
// check every route and every response against the document (parsed by
// internal/contracttest), and the Go client (package client) covers every
// operation in it.
//
// openapi.json is generated from openapi.yaml (go generate ./api/, which runs
// gen_json.go) and checked in; TestJSONIsGenerated fails when it is stale.
// Nothing here parses the document at run time, so the binary links no
// OpenAPI library (docs/development.md).
package api

import _ "embed"

//go:generate go run gen_json.go

//go:embed openapi.yaml
var yamlDoc []byte

//go:embed openapi.json
var jsonDoc []byte

// YAML returns the document as written (a copy).
func YAML() []byte { return append([]byte(nil), yamlDoc...) }

// JSON returns the document as JSON (a copy): openapi.json, generated from
// openapi.yaml at build time, keys in the order of the YAML.
func JSON() []byte { return append([]byte(nil), jsonDoc...) }
