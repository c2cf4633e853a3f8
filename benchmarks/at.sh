#!/bin/sh
# at.sh REV COMMAND [ARGS...]
#
# Runs COMMAND in this directory with the benchmarks module built against
# Sluice as committed at REV (such as HEAD or a commit id) instead of the
# work tree, which may hold someone's unfinished edits. go run, go test and
# go build all follow it (through GOFLAGS=-modfile). SLUICE_REV names the
# commit for cmd/compare's report.
#
#   cd benchmarks && ./at.sh HEAD go test -run '^$' -bench Hot -benchmem
set -eu
if [ $# -lt 2 ]; then
	echo "usage: $0 REV COMMAND [ARGS...]" >&2
	exit 2
fi
rev=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
id=$(git -C "$here/.." rev-parse --short=12 "$rev^{commit}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM # a signal ends the script (through the EXIT trap), not only the command it ran
mkdir "$tmp/src"
git -C "$here/.." archive "$id" | tar -x -C "$tmp/src"
cp "$here/go.mod" "$tmp/at.mod"
cp "$here/go.sum" "$tmp/at.sum"
# Sluice and its redisstore module, both as committed at REV.
go mod edit -modfile="$tmp/at.mod" -replace "github.com/sluicehq/sluice=$tmp/src" \
	-replace "github.com/sluicehq/sluice/redisstore=$tmp/src/redisstore"
cd "$here"
GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod -modfile=$tmp/at.mod" SLUICE_REV="commit $id" "$@"
