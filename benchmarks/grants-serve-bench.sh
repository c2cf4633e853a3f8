#!/bin/bash
# grants-serve-bench.sh DURATION SLUICE
#
# `sluice serve` replicas sharing one hot key on one Valkey, with and
# without grants (grants: auto), in one run: for each number of replicas in
# REPLICAS (default "2 4"), the replicas are started on one Valkey with
# the configuration below, then loaded one leg after the other for
# DURATION each: POST /v1/check of one key of the policy "plain", then of
# "granted" (the same limit with grants: auto), then Envoy gRPC
# ShouldRateLimit of one descriptor value of each (benchmarks/cmd/rlsload
# with -keys 1). Every replica is loaded at once (wrk -t1 and rlsload, C
# connections or callers in all, default 64, split between them). One line
# per leg: the decisions per second of all the replicas together, the
# Valkey script calls made (EVALSHA, EVAL, FCALL, read from INFO
# commandstats, reset before the leg) and the script calls per decision.
# The load average is printed before and after.
#
#   (cd benchmarks && go build -o /tmp/rlsload ./cmd/rlsload)
#   go build -o /tmp/sluice ./cmd/sluice
#   RLSLOAD=/tmp/rlsload flock /tmp/sluice-cpu.lock benchmarks/grants-serve-bench.sh 5s /tmp/sluice
#
# The limit (gcra, burst 50,000, rate 50,000/s) is above what this machine
# can offer, so the legs measure the admitted path. Ports: Valkey on 16480,
# replica i on 18400+10i (HTTP) and +1 (gRPC). Everything started is
# stopped at the end.
set -u
if [ $# -ne 2 ]; then
	echo "usage: $0 DURATION SLUICE" >&2
	exit 2
fi
dur=$1 sluice=$2
rlsload=${RLSLOAD:-rlsload}
conns=${C:-64}
read -r -a replicaCounts <<<"${REPLICAS:-2 4}"
for tool in wrk valkey-server valkey-cli "$rlsload" "$sluice"; do
	command -v "$tool" >/dev/null || { echo "$0: $tool not found (see the usage above)" >&2; exit 2; }
done
out=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

cat >"$out/sluice.yaml" <<'YAML'
policies:
  - {name: plain, algorithm: gcra, burst: 50000, rate: 50000/s}
  - {name: granted, algorithm: gcra, burst: 50000, rate: 50000/s, grants: auto}
domains:
  - domain: bench
    counting: each
    descriptors:
      - {key: plain, policy: plain}
      - {key: granted, policy: granted}
YAML
for pol in plain granted; do
	cat >"$out/$pol.lua" <<LUA
local headers = { ["Content-Type"] = "application/json" }
local body = '{"policy":"$pol","key":"all"}'
request = function() return wrk.format("POST", "/v1/check", headers, body) end
LUA
done

vport=16480
valkey-server --port "$vport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$out/valkey.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do valkey-cli -p "$vport" ping >/dev/null 2>&1 && break; sleep 0.1; done

# scriptCalls: the script calls Valkey counted since the last reset.
scriptCalls() {
	valkey-cli -p "$vport" info commandstats | tr -d '\r' |
		awk -F'[:=,]' '/^cmdstat_(evalsha|eval|fcall|evalsha_ro|eval_ro|fcall_ro):/ {n += $3} END {print n + 0}'
}

# leg N PATH POLICY: loads the N replicas at once; prints the leg's line.
leg() {
	local n=$1 path=$2 pol=$3 per=$(( conns / $1 )) i
	valkey-cli -p "$vport" config resetstat >/dev/null
	local loads=()
	for i in $(seq 0 $((n - 1))); do
		if [ "$path" = http ]; then
			wrk -t1 -c"$per" -d"$dur" -s "$out/$pol.lua" "http://127.0.0.1:$((18400 + 10 * i))" >"$out/leg.$i" 2>&1 &
			loads+=($!)
		else
			"$rlsload" -addr "127.0.0.1:$((18401 + 10 * i))" -c "$per" -conns 1 -d "$dur" -domain bench -key "$pol" -keys 1 >"$out/leg.$i" 2>&1 &
			loads+=($!)
		fi
	done
	wait "${loads[@]}"
	local calls decisions rate
	calls=$(scriptCalls)
	if [ "$path" = http ]; then
		decisions=$(cat "$out"/leg.* | awk '/requests in/ {n += $1} END {print n + 0}')
		rate=$(cat "$out"/leg.* | awk '/^Requests\/sec:/ {r += $2} END {printf "%.0f", r}')
	else
		decisions=$(cat "$out"/leg.* | awk '/^calls / {n += $2} END {print n + 0}')
		rate=$(cat "$out"/leg.* | awk '/^calls / {r += $5} END {printf "%.0f", r}')
	fi
	awk -v n="$n" -v p="$path" -v pol="$pol" -v r="$rate" -v d="$decisions" -v c="$calls" \
		'BEGIN {printf "replicas %d %-4s %-7s %8d decisions/s  %9d decisions  %8d script calls  %.4f calls/decision\n", n, p, pol, r, d, c, (d > 0 ? c / d : 0)}'
	grep -h "first error\|errors [1-9]\|Non-2xx\|Socket errors" "$out"/leg.* | head -3
	rm -f "$out"/leg.*
}

echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in "${replicaCounts[@]}"; do
	rep=()
	for i in $(seq 0 $((n - 1))); do
		GOMAXPROCS=${GOMAXPROCS:-2} "$sluice" serve --config "$out/sluice.yaml" --valkey "127.0.0.1:$vport" \
			--listen "127.0.0.1:$((18400 + 10 * i))" --grpc-listen "127.0.0.1:$((18401 + 10 * i))" >"$out/sluice.$i.log" 2>&1 &
		pids+=($!) rep+=($!)
	done
	for i in $(seq 0 $((n - 1))); do
		for _ in $(seq 100); do curl -fs "http://127.0.0.1:$((18400 + 10 * i))/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
	done
	for path in http grpc; do
		for pol in plain granted; do
			leg "$n" "$path" "$pol"
		done
	done
	for p in "${rep[@]}"; do kill "$p"; wait "$p" 2>/dev/null; done
	pids=("${pids[0]}")
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
