// Package version reads the build's version and VCS stamp
// (debug.ReadBuildInfo): what `api version` prints and GET /version answers.
// It is a leaf: it imports nothing of the module.
//
// A build that knows its version can stamp it at link time; the Containerfile,
// scripts/image.sh and make build do (their build context may have no .git,
// so the Go toolchain's VCS stamp is missing there):
//
//	go build -ldflags "-X github.com/repolock/repolock/internal/version.version=v1.2.3 \
//	    -X github.com/repolock/repolock/internal/version.revision=0123abc..." ./cmd/api
//
// A stamped value wins over what debug.ReadBuildInfo says; an empty one is
// ignored.
package version

import (
	"runtime/debug"
	"sync"
)

// Info is what `api version` prints and GET /version answers: the module
// version and the VCS stamp of the build.
type Info struct {
	// Version is the main module's version ("(devel)" for a build from a
	// work tree).
	Version string `json:"version"`
	// Revision is the VCS revision the binary was built from ("" when the
	// build carries none, as in `go test`).
	Revision string `json:"revision"`
	// Time is the commit time of Revision (RFC 3339), "" when unknown.
	Time string `json:"time"`
	// Modified is true when the work tree had uncommitted changes.
	Modified bool `json:"modified"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go_version"`
}

// Set with -ldflags -X (see the package doc); empty unless stamped.
var (
	version  string
	revision string
)

// Get returns the build's version information (read once).
var Get = sync.OnceValue(func() Info { return get(version, revision) })

func get(stampedVersion, stampedRevision string) Info {
	v := read()
	if stampedVersion != "" {
		v.Version = stampedVersion
	}
	if stampedRevision != "" && stampedRevision != v.Revision {
		// Time and Modified describe the toolchain's revision, not this one.
		v.Revision, v.Time, v.Modified = stampedRevision, "", false
	}
	return v
}

func read() Info {
	v := Info{Version: "(unknown)"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.GoVersion = bi.GoVersion
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}
