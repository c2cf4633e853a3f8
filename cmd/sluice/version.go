package main

import (
	"context"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/cmd/sluice/internal/buildinfo"
)

const versionUsage = `usage: sluice version [--json]

Prints the module version, the version-control revision and commit time
this binary was built from, and the Go toolchain, as recorded by the Go
toolchain in the binary. "sluice --version" is the same. sluice serve
exports the same values as the sluice_build_info metric.

flags:
`

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version")
	asJSON := fs.Bool("json", false, "print JSON: module, version, revision, time, modified, go")
	if code, ok := parseNoArgs(fs, versionUsage, args, stdout, stderr); !ok {
		return code
	}
	bi := buildinfo.Read()
	if *asJSON {
		writeJSON(stdout, bi)
		return 0
	}
	fmt.Fprintln(stdout, bi)
	return 0
}
