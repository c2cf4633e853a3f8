// Package buildinfo says which build of Sluice is running: the module
// version and the version-control revision the Go toolchain recorded in the
// binary (runtime/debug.ReadBuildInfo). sluice version prints it, and
// sluice serve exports it as the sluice_build_info metric.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info describes a build. Fields the toolchain did not record are empty.
type Info struct {
	// Path is the main module's path, github.com/sluicehq/sluice.
	Path string `json:"module"`
	// Version is the main module's version: a tag such as v1.2.0 for
	// "go install ...@v1.2.0", a pseudo-version derived from the
	// revision for a build in a checkout, "(devel)" when the toolchain
	// knew neither.
	Version string `json:"version"`
	// Revision is the version-control commit the binary was built from,
	// Time its commit time (RFC 3339) and Modified whether the work tree
	// had uncommitted changes.
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go"`
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "(unknown)", GoVersion: runtime.Version()}
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	i := Info{Path: bi.Main.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if i.Version == "" {
		i.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		if set := vcsSettings[s.Key]; set != nil {
			set(&i, s.Value)
		}
	}
	return i
}

// vcsSettings note the build settings of version control the toolchain
// records: the revision, its time, and whether the work tree was modified.
var vcsSettings = map[string]func(i *Info, value string){
	"vcs.revision": func(i *Info, value string) { i.Revision = value },
	"vcs.time":     func(i *Info, value string) { i.Time = value },
	"vcs.modified": func(i *Info, value string) { i.Modified = value == "true" },
}

// Short is the one word that best names the build: the module version when
// it is a release or pseudo-version, else the revision (12 characters, with
// "+dirty" when modified), else "(devel)".
func (i Info) Short() string {
	if i.released() {
		return i.Version
	}
	if i.Revision != "" {
		return i.shortRevision()
	}
	return i.Version
}

// released reports whether the version is a release or pseudo-version,
// not "(devel)", "(unknown)" or empty.
func (i Info) released() bool {
	return i.Version != "(devel)" && i.Version != "(unknown)" && i.Version != ""
}

// shortRevision is the revision's first 12 characters, with "+dirty"
// when the work tree was modified.
func (i Info) shortRevision() string {
	r := i.Revision
	if len(r) > 12 {
		r = r[:12]
	}
	if i.Modified {
		r += "+dirty"
	}
	return r
}

// String is the line sluice version prints, such as
//
//	sluice v1.2.0 (github.com/sluicehq/sluice, revision 0123abcd..., 2026-11-30T10:00:00Z) go1.26.8
func (i Info) String() string {
	s := "sluice " + i.Version
	if parts := i.details(); len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return fmt.Sprintf("%s %s", s, i.GoVersion)
}

// details are what String says in parentheses: the module path, the
// revision and its time, those known.
func (i Info) details() []string {
	var parts []string
	if i.Path != "" {
		parts = append(parts, i.Path)
	}
	if i.Revision != "" {
		rev := "revision " + i.Revision
		if i.Modified {
			rev += " with uncommitted changes"
		}
		parts = append(parts, rev)
	}
	if i.Time != "" {
		parts = append(parts, i.Time)
	}
	return parts
}
