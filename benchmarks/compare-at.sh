#!/bin/sh
# compare-at.sh REV [compare flags...]
#
# Runs cmd/compare (from this work tree) against Sluice as committed at REV
# (such as HEAD or a commit id), not against the work tree, which may hold
# someone's unfinished edits. The report names REV.
#
#   cd benchmarks && ./compare-at.sh HEAD -out report.md
set -eu
if [ $# -lt 1 ]; then
	echo "usage: $0 REV [compare flags...]" >&2
	exit 2
fi
rev=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
id=$(git -C "$here/.." rev-parse --short=12 "$rev^{commit}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir "$tmp/src"
git -C "$here/.." archive "$id" | tar -x -C "$tmp/src"
cp "$here/go.mod" "$tmp/compare.mod"
cp "$here/go.sum" "$tmp/compare.sum"
go mod edit -modfile="$tmp/compare.mod" -replace "github.com/sluicehq/sluice=$tmp/src"
cd "$here"
go run -mod=mod -modfile="$tmp/compare.mod" ./cmd/compare -sluice-rev "commit $id" \
	-command "cd benchmarks && ./compare-at.sh $rev $*" "$@"
