#!/bin/sh
# valkey-ceiling.sh [PORT]
#
# The server-side ceiling: valkey-benchmark running EVALSHA of Sluice's
# scripts (internal/luascript/scripts/*.lua in this work tree), pipelined 16 deep
# from 50 connections, on one hot key and on random keys (__rand_int__ over
# 100k), one key per call and 16 keys per call. No Go client is involved:
# this is what one Valkey can decide, the bound for any client library.
#
# Starts its own valkey-server on PORT (default 36399), FLUSHALLs it between
# runs, and stops it at the end. Set DECISIONS to change the decisions per
# run (default 500000).
set -eu
port=${1:-36399}
decisions=${DECISIONS:-500000}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
valkey-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize no --logfile "$dir/log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT INT TERM
cli() { valkey-cli -h 127.0.0.1 -p "$port" "$@"; }
for i in 1 2 3 4 5 6 7 8 9 10; do cli ping >/dev/null 2>&1 && break; sleep 0.2; done

# bench NAME CALLS_KEYS ARGS...: calls/s as valkey-benchmark reports it.
bench() {
	name=$1
	n=$2
	shift 2
	qps=$(valkey-benchmark -h 127.0.0.1 -p "$port" -c 50 -P 16 -n "$n" -r 100000 --csv "$@" | tail -1 | cut -d, -f2 | tr -d '"')
	echo "$name $qps"
}

# args KEYS ARGV5: ARGV repeated once per key.
repeat() { k=$1; shift; i=0; while [ $i -lt "$k" ]; do printf '%s ' "$@"; i=$((i + 1)); done; }

printf '| script | keys | keys per call | calls/s | decisions/s |\n|---|---|---:|---:|---:|\n'
for alg in gcra token_bucket; do
	# The script as luascript builds it: prelude, the algorithm, the batch
	# driver and the one-slot ending.
	s="$here/../internal/luascript/scripts"
	sha=$(cli script load "$(cat "$s/prelude.lua" "$s/$alg.lua" "$s/batch.lua" "$s/one.lua")")
	# ARGV per key (see batch.lua): now (0: the server's TIME), limit,
	# parameter, cost, flag, receipt, override key index, override bounds.
	case $alg in
	gcra) argv="0 1000000 1 1 0 0 0 0" ;;          # burst 1e6, interval 1µs: never refuses
	token_bucket) argv="0 1000000 1 1 0 0 0 0" ;;  # capacity 1e6, 1 token/µs
	esac
	# One call first, so that a script that fails says so instead of being
	# timed: valkey-benchmark counts error replies as answers.
	# shellcheck disable=SC2046
	if ! out=$(cli evalsha "$sha" 1 ceiling:check $argv 2>&1) || echo "$out" | grep -qi err; then
		echo "valkey-ceiling.sh: $alg script failed: $out" >&2
		exit 1
	fi
	cli flushall >/dev/null
	for keys in hot random; do
		for per in 1 16; do
			if [ "$keys" = hot ]; then
				k=$(repeat "$per" "ceiling:{hot}")
			else
				k=$(repeat "$per" "ceiling:{__rand_int__}")
			fi
			# shellcheck disable=SC2086
			qps=$(bench x $((decisions / per)) EVALSHA "$sha" "$per" $k $(repeat "$per" $argv) | cut -d' ' -f2)
			dps=$(awk -v q="$qps" -v p="$per" 'BEGIN { printf "%d", q * p }')
			printf '| %s | %s | %d | %s | %s |\n' "$alg" "$keys" "$per" "$qps" "$dps"
			cli flushall >/dev/null
		done
	done
done
