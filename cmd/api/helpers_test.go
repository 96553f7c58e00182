package main

import (
	"context"
	"testing"

	"github.com/repolock/repolock/internal/database"
)

// testServices are the domain services on a test database, built as a
// command builds them (loadServices: keyed under the stored aliases as they
// are when it is called).
func testServices(t testing.TB, db *database.DB) *services {
	t.Helper()
	svc, err := loadServices(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}
