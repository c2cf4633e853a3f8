#!/bin/sh
# valkey-ceiling.sh [PORT]
#
# The server-side ceiling: valkey-benchmark running EVALSHA of Sluice's
# scripts (luascript/scripts/*.lua in this work tree), pipelined 16 deep
# from 50 connections, on one hot key and on random keys (__rand_int__ over
# 100k), one key per call and 16 keys per call. No Go client is involved:
# this is what one Valkey can decide, the bound for any client library.
#
# Starts its own valkey-server on PORT (default 36399), FLUSHALLs it between
# runs, and stops it at the end. Set DECISIONS to change the decisions per
# run (default 500000), CONNS and PIPELINE valkey-benchmark's connections
# and calls pipelined on each (default 50 and 16): CONNS=8 PIPELINE=1 keeps
# 128 decisions in flight at 16 keys per call, as many as 128 goroutines
# calling Allow can.
set -eu
port=${1:-36399}
decisions=${DECISIONS:-500000}
conns=${CONNS:-50}
pipeline=${PIPELINE:-16}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
valkey-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize no --logfile "$dir/log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
trap 'exit 1' INT TERM # a signal ends the script (through the EXIT trap), not only the command it ran
cli() { valkey-cli -h 127.0.0.1 -p "$port" "$@"; }
for i in 1 2 3 4 5 6 7 8 9 10; do cli ping >/dev/null 2>&1 && break; sleep 0.2; done

# bench NAME CALLS ARGS...: calls/s as valkey-benchmark reports it, the
# last argument read from $dir/args (-x: binary, as the scripts take it).
bench() {
	name=$1
	n=$2
	shift 2
	qps=$(valkey-benchmark -h 127.0.0.1 -p "$port" -c "$conns" -P "$pipeline" -n "$n" -r 100000 --csv -x "$@" <"$dir/args" | tail -1 | cut -d, -f2 | tr -d '"')
	echo "$name $qps"
}

# repeat K WORDS...: WORDS K times.
repeat() { k=$1; shift; i=0; while [ $i -lt "$k" ]; do printf '%s ' "$@"; i=$((i + 1)); done; }

# le64 N: N (not negative) as eight bytes, little-endian.
# (Shell variables are global: le64's are its own.)
le64() {
	le_n=$1 le_i=0 le_s=
	while [ $le_i -lt 8 ]; do
		le_s="$le_s\\$(printf '%03o' $((le_n % 256)))"
		le_n=$((le_n / 256)) le_i=$((le_i + 1))
	done
	printf "$le_s"
}

# records K: K decisions' records, as luascript.AppendArgs writes them
# (see batch.lua): now 0 (the server's TIME), limit 1e6, parameter 1 µs,
# cost 1, receipt 0, and no flag, calendar or override.
records() {
	i=0
	while [ $i -lt "$1" ]; do
		le64 0; le64 1000000; le64 1; le64 1; le64 0; printf '\000\000\000'
		i=$((i + 1))
	done
}

printf '| script | keys | keys per call | calls/s | decisions/s |\n|---|---|---:|---:|---:|\n'
for alg in gcra token_bucket; do
	# The script as luascript builds it: prelude, the algorithm, the batch
	# driver and the one-slot ending.
	s="$here/../luascript/scripts"
	sha=$(cli script load "$(cat "$s/prelude.lua" "$s/$alg.lua" "$s/batch.lua" "$s/one.lua")")
	# GCRA: burst 1e6, interval 1µs; token bucket: capacity 1e6, a token
	# every µs: neither refuses. One call first, so that a script that
	# fails says so instead of being timed: valkey-benchmark counts error
	# replies as answers. Its reply is one record of 42 bytes (and
	# valkey-cli's newline).
	records 1 >"$dir/args"
	if [ "$(cli -x evalsha "$sha" 1 ceiling:check <"$dir/args" 2>&1 | wc -c)" -ne 43 ]; then
		echo "valkey-ceiling.sh: $alg script failed: $(cli -x evalsha "$sha" 1 ceiling:check <"$dir/args" 2>&1 | tr -c '[:print:]' .)" >&2
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
			records "$per" >"$dir/args"
			# shellcheck disable=SC2086
			qps=$(bench x $((decisions / per)) EVALSHA "$sha" "$per" $k | cut -d' ' -f2)
			dps=$(awk -v q="$qps" -v p="$per" 'BEGIN { printf "%d", q * p }')
			printf '| %s | %s | %d | %s | %s |\n' "$alg" "$keys" "$per" "$qps" "$dps"
			cli flushall >/dev/null
		done
	done
done
