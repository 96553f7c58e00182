package version_test

import (
	"encoding/json"
	"testing"

	"github.com/repolock/repolock/internal/version"
)

// TestJSON: the field names GET /version answers (and the client decodes).
func TestJSON(t *testing.T) {
	b, err := json.Marshal(version.Info{Version: "v1.2.3", Revision: "abc", Time: "2024-01-02T03:04:05Z", Modified: true, GoVersion: "go1.23"})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"version":"v1.2.3","revision":"abc","time":"2024-01-02T03:04:05Z","modified":true,"go_version":"go1.23"}`
	if string(b) != want {
		t.Fatalf("json = %s, want %s", b, want)
	}
	if got := version.Get(); got.GoVersion == "" || got.Version == "" {
		t.Fatalf("Get() = %+v: want the toolchain and a version", got)
	}
}
