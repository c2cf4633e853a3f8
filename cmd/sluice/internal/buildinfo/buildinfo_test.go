package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/sluicehq/sluice", Version: "v0.0.0-20261130101010-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-30T10:10:10Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	i := fromBuildInfo(bi)
	want := Info{Path: "github.com/sluicehq/sluice", Version: "v0.0.0-20261130101010-0123456789ab+dirty",
		Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2026-11-30T10:10:10Z", Modified: true, GoVersion: "go1.26.8"}
	if i != want {
		t.Fatalf("got %+v\nwant %+v", i, want)
	}
	if got := i.Short(); got != want.Version {
		t.Errorf("Short = %q, want the module version", got)
	}
	s := i.String()
	for _, part := range []string{"sluice v0.0.0-", "revision 0123456789abcdef0123456789abcdef01234567 with uncommitted changes", "2026-11-30T10:10:10Z", "go1.26.8"} {
		if !strings.Contains(s, part) {
			t.Errorf("String() = %q lacks %q", s, part)
		}
	}
}

func TestShort(t *testing.T) {
	for _, c := range []struct {
		i    Info
		want string
	}{
		{Info{Version: "v1.2.0", Revision: "abc"}, "v1.2.0"},
		{Info{Version: "(devel)", Revision: "0123456789abcdef"}, "0123456789ab"},
		{Info{Version: "(devel)", Revision: "0123456789abcdef", Modified: true}, "0123456789ab+dirty"},
		{Info{Version: "(devel)"}, "(devel)"},
		{fromBuildInfo(&debug.BuildInfo{}), "(devel)"},
	} {
		if got := c.i.Short(); got != c.want {
			t.Errorf("%+v.Short() = %q, want %q", c.i, got, c.want)
		}
	}
}

// TestRead: a test binary has build information, at least the toolchain's
// version.
func TestRead(t *testing.T) {
	if i := Read(); i.GoVersion != runtime.Version() || i.Version == "" {
		t.Errorf("Read() = %+v", i)
	}
}
