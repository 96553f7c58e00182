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

// TestStamped: a version and revision stamped at link time (-ldflags -X,
// as the Containerfile does) win over the build info; empty ones do not.
func TestStamped(t *testing.T) {
	base := version.Get()
	for _, tc := range []struct {
		name, version, revision string
		want                    func(version.Info) bool
	}{
		{"none", "", "", func(v version.Info) bool { return v == base }},
		{"both", "v1.2.3", "0123abcd", func(v version.Info) bool {
			return v.Version == "v1.2.3" && v.Revision == "0123abcd" && v.GoVersion == base.GoVersion && (base.Revision == "0123abcd" || v.Time == "" && !v.Modified)
		}},
		{"version only", "v1.2.3-4-gabc", "", func(v version.Info) bool {
			return v.Version == "v1.2.3-4-gabc" && v.Revision == base.Revision && v.Time == base.Time
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := version.Stamped(tc.version, tc.revision); !tc.want(got) {
				t.Errorf("stamped %q %q: %+v (build info %+v)", tc.version, tc.revision, got, base)
			}
		})
	}
}
