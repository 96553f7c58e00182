//go:build ignore

// gen_json writes openapi.json from openapi.yaml: go generate ./api/.
package main

import (
	"log"
	"os"

	"github.com/repolock/repolock/api/internal/openapijson"
)

func main() {
	y, err := os.ReadFile("openapi.yaml")
	if err != nil {
		log.Fatal(err)
	}
	j, err := openapijson.FromYAML(y)
	if err != nil {
		log.Fatalf("openapi.yaml: %v", err)
	}
	if err := os.WriteFile("openapi.json", j, 0o644); err != nil {
		log.Fatal(err)
	}
}
