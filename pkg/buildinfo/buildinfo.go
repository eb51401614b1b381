// Package buildinfo names the running build: what `sleipnir --version` prints and the HTTP API's server metadata
// reports.
package buildinfo

import "runtime/debug"

// version is set at link time: go build -ldflags "-X github.com/sleipnir-serving/sleipnir/pkg/buildinfo.version=v1.2".
var version string

// Version is the version set at link time, else the one Go stamped from the module or its VCS (a pseudo-version
// with the commit, "+dirty" for uncommitted changes), else "dev" with the commit when Go recorded one.
func Version() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	v, dirty := "dev", ""
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			v += "-" + s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	return v + dirty
}
