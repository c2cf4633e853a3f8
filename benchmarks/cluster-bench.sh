#!/bin/sh
# cluster-bench.sh SLUICE [OTHER_SLUICE]
#
# One Valkey against a Valkey Cluster, through `sluice bench` (GCRA, 128
# goroutines, 100k keys, 2s timeout): one server, a 3-primary Cluster and
# a 1-primary Cluster (every slot on one node: cluster mode and the
# scripts of several slots, without a second server process), alternating,
# ROUNDS times (default 2), DURATION each (default 8s). With OTHER_SLUICE
# (another build of cmd/sluice), the 3-primary Cluster runs with it too,
# beside SLUICE, for a before/after in the same run; OTHER_ARGS are more
# `sluice bench` flags for that row (such as "-batching 1" with the same
# build twice).
#
# For each run: decisions/s, p99 latency, decisions per script call and server µs per
# decision as `sluice bench` reads them from INFO commandstats (wall time
# inside the server's script calls), and from /proc/PID/schedstat the
# servers' CPU time per decision and the time they spent runnable but not
# running (waiting for a core) per decision. Linux only.
#
# FIFO=1 runs the servers SCHED_FIFO (chrt; needs root): a server then runs
# until it waits for input, so a script call is never preempted by the
# client or another server and INFO commandstats counts its own work only,
# as on a node with a core of its own.
#
# Starts its servers on PORT..PORT+4 (default 36400) and stops them at the
# end. Build first, then measure on a quiet machine:
#
#   go build -o /tmp/sluice ./cmd/sluice && benchmarks/cluster-bench.sh /tmp/sluice
set -eu
if [ $# -lt 1 ]; then
	echo "usage: $0 SLUICE [OTHER_SLUICE]" >&2
	exit 2
fi
sluice=$1
other=${2:-}
port=${PORT:-36400}
rounds=${ROUNDS:-2}
duration=${DURATION:-8s}
. "$(dirname "$0")/valkey-servers.sh"

one=$port
c1=$((port + 1)) c2=$((port + 2)) c3=$((port + 3))
solo=$((port + 4))
start "$one"
for p in "$c1" "$c2" "$c3" "$solo"; do start "$p" cluster; done
yes yes | valkey-cli --cluster create "127.0.0.1:$c1" "127.0.0.1:$c2" "127.0.0.1:$c3" --cluster-replicas 0 >/dev/null
valkey-cli -p "$solo" cluster addslotsrange 0 16383 >/dev/null
cluster_ok "$c1" "$solo"

# run LABEL SLUICE ARGS PORTS...: ARGS are more flags of sluice bench.
run() {
	label=$1 bin=$2 args=$3
	shift 3
	addrs=$(for p in "$@"; do printf '127.0.0.1:%s,' "$p"; done)
	s0=$(sched "$@")
	# shellcheck disable=SC2086
	out=$("$bin" bench -valkey "${addrs%,}" -algorithm gcra -concurrency 128 -keys 100000 -duration "$duration" -timeout 2s $args 2>/dev/null)
	s1=$(sched "$@")
	echo "$out" | awk -v label="$label" -v s="$s0 $s1" '
		/^decisions/ { n = $2; rate = $5 }
		/^scripts/ { calls = $2; per = $4; usec = $8 }
		/^degraded/ { deg = $2 }
		/^latency/ { p99 = $5 }
		END {
			split(s, v, " ")
			printf "| %s | %s | %s | %s | %s | %.1f | %.1f | %s |\n", label, rate, p99, per, usec,
				(v[3] - v[1]) / 1000 / n, (v[4] - v[2]) / 1000 / n, deg
		}'
}

echo "load before: $(uptime)"
echo
echo "| setup | decisions/s | p99 | decisions per call | server µs per decision (commandstats) | server CPU µs per decision | server waiting for a core, µs per decision | degraded |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for _ in $(seq "$rounds"); do
	run "one server" "$sluice" "" "$one"
	run "3-primary Cluster" "$sluice" "" "$c1" "$c2" "$c3"
	if [ -n "$other" ]; then
		run "3-primary Cluster, OTHER_SLUICE ${OTHER_ARGS:-}" "$other" "${OTHER_ARGS:-}" "$c1" "$c2" "$c3"
	fi
	run "1-primary Cluster" "$sluice" "" "$solo"
done
echo
echo "load after: $(uptime)"
