#!/bin/sh
# cluster-callcost.sh CALLCOST
#
# What a decision costs a Valkey server inside script calls of a fixed
# size (KEYS decisions per call, default 16), one server against a
# 1-primary Cluster (every slot on one node): callcost (cmd/callcost)
# without batching, alternating, ROUNDS times (default 3), for keys of
# random slots, of one slot (declared in KEYS) and of two slots (the
# Cross script), INTERVAL the GCRA interval (default 1us; 2s keeps every
# key for the run). FIFO=1 runs the servers SCHED_FIFO (chrt; root), so
# that no script call is preempted. Starts its servers on PORT and PORT+1
# (default 36500) and stops them at the end.
#
#   (cd benchmarks && go build -o /tmp/callcost ./cmd/callcost) && FIFO=1 benchmarks/cluster-callcost.sh /tmp/callcost
set -eu
if [ $# -ne 1 ]; then
	echo "usage: $0 CALLCOST" >&2
	exit 2
fi
bin=$1
port=${PORT:-36500}
rounds=${ROUNDS:-3}
keys=${KEYS:-16}
interval=${INTERVAL:-1us}
. "$(dirname "$0")/valkey-servers.sh"

one=$port solo=$((port + 1))
start "$one"
start "$solo" cluster
valkey-cli -p "$solo" cluster addslotsrange 0 16383 >/dev/null
cluster_ok "$solo"

echo "load before: $(uptime)"
echo
echo "| setup ($keys keys per call, interval $interval) | decisions per call | server µs per decision (commandstats) | server CPU µs per decision | decisions/s |"
echo "|---|---:|---:|---:|---:|"
for _ in $(seq "$rounds"); do
	"$bin" -addr "127.0.0.1:$one" -keys "$keys" -interval "$interval" -label "one server, keys of random slots"
	"$bin" -addr "127.0.0.1:$solo" -cluster -keys "$keys" -interval "$interval" -tags 1 -label "1-primary Cluster, keys of one slot (KEYS)"
	"$bin" -addr "127.0.0.1:$solo" -cluster -keys "$keys" -interval "$interval" -tags 2 -label "1-primary Cluster, keys of two slots (Cross script)"
	"$bin" -addr "127.0.0.1:$solo" -cluster -keys "$keys" -interval "$interval" -label "1-primary Cluster, keys of random slots (Cross script)"
done
echo
echo "load after: $(uptime)"
