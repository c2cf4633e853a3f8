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
exec "$(dirname "$0")/at.sh" "$rev" go run ./cmd/compare -command "cd benchmarks && ./compare-at.sh $rev $*" "$@"
