// Package version reads the build's version and VCS stamp
// (debug.ReadBuildInfo): what `api version` prints and GET /version answers.
// It is a leaf: it imports nothing of the module.
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

// Get returns the build's version information (read once).
var Get = sync.OnceValue(func() Info {
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
})
