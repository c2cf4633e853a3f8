#!/bin/bash
# envoy-bench.sh DURATION UPSTREAM SLUICE [SLUICE...]
#
# docs/envoy-bench.md's side-by-side run: envoyproxy/ratelimit (the binary
# UPSTREAM, built from its repository outside this one) and `sluice serve`
# (each SLUICE binary: several compare builds; a binary named servefloor,
# benchmarks/cmd/servefloor, is shown as the floor of a service deciding on
# Valkey), each with a Valkey of its
# own, started with the same environment and configuration
# (docs/envoy-bench), then loaded one after the other for DURATION each:
# HTTP POST /json from wrk (2 threads, 64 connections, docs/envoy-bench.lua),
# then a no-op Go handler answering the same JSON (benchmarks/cmd/noopjson,
# the ceiling), then gRPC ShouldRateLimit from benchmarks/cmd/rlsload (64
# callers, 2 connections), the no-op handler's gRPC server last. One line per leg: requests/s, p50, p99, and the
# CPU the service, its Valkey and the load generator took and the machine
# left idle, in percent of one core (the machine has 2: 200 in all), read
# from /proc before and after the leg. The load average is printed before
# and after.
#
#   (cd benchmarks && go build -o /tmp/noopjson ./cmd/noopjson && go build -o /tmp/rlsload ./cmd/rlsload)
#   go build -o /tmp/sluice ./cmd/sluice
#   NOOP=/tmp/noopjson RLSLOAD=/tmp/rlsload benchmarks/envoy-bench.sh 10s /path/to/ratelimit /tmp/sluice
#
# WRK_ARGS (default "-t2 -c64") and RLSLOAD_ARGS (default "-c 64 -conns 2")
# change the load; VALKEY_ARGS adds arguments to every Valkey's command
# line (such as "--hz 100"). PIN=1 keeps the load generator off the services' core:
# services, Valkeys and the no-op handler run on CPU 0, wrk and rlsload on
# CPU 1 (taskset), so the generator's CPU is not taken from the service
# measured (each Go process then runs with GOMAXPROCS=1).
#
# LEGS=N runs N rounds of short legs instead of one (DURATION each, such
# as 3s): in each round every target (envoyproxy/ratelimit, each SLUICE,
# the no-op handler) is loaded once over HTTP and once over gRPC, each
# round starting one target later than the last; then prints each
# target's medians over the rounds and, for each SLUICE and the no-op
# handler, its ratios to envoyproxy/ratelimit's leg of the same round, their
# medians and in how many rounds both halves of the goal held (twice the
# requests per second, half the p99); and each SLUICE's requests per
# second as a share of the no-op handler's in the same round, and their
# median. The noise from leg to leg on a shared machine is larger than one
# run can tell from a difference.
#
# Ports: Valkeys on 16390+i, services on 18180+100i (HTTP), +1 (gRPC), +2
# (debug); the no-op handler on 18099 (HTTP) and 18098 (gRPC). Everything started is stopped at the
# end.
set -u
if [ $# -lt 3 ]; then
	echo "usage: $0 DURATION UPSTREAM SLUICE [SLUICE...]" >&2
	exit 2
fi
dur=$1
shift
repo=$(cd "$(dirname "$0")/.." && pwd)
noop=${NOOP:-noopjson}
rlsload=${RLSLOAD:-rlsload}
legs=${LEGS:-1}
round=0
read -r -a wrkArgs <<<"${WRK_ARGS:--t2 -c64}"
read -r -a rlsArgs <<<"${RLSLOAD_ARGS:--c 64 -conns 2}"
read -r -a vkArgs <<<"${VALKEY_ARGS:-}"
svcPin=() genPin=()
if [ "${PIN:-0}" = 1 ]; then
	svcPin=(taskset -c 0) genPin=(taskset -c 1)
fi
for tool in wrk valkey-server "$noop" "$rlsload" ${svcPin[0]+taskset}; do
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

# cpu PID: the process's user and system time, in 1/100 s.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# idle: the machine's idle and iowait time, in 1/100 s (all cores).
idle() { awk '/^cpu / {print $5 + $6; exit}' /proc/stat; }

env=(RUNTIME_ROOT="$repo/docs/envoy-bench" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false
	USE_STATSD=false REDIS_SOCKET_TYPE=tcp LOG_LEVEL=warn HOST=127.0.0.1 GRPC_HOST=127.0.0.1 DEBUG_HOST=127.0.0.1)
names=() svc=() vk=()
i=0
for bin in "$@"; do
	vport=$((16390 + i)) hport=$((18180 + 100 * i))
	"${svcPin[@]}" valkey-server --port "$vport" --save "" --appendonly no --bind 127.0.0.1 "${vkArgs[@]}" >/dev/null 2>&1 &
	vk[i]=$!
	pids+=($!)
	sleep 0.3
	args=(serve)
	name="sluice $(basename "$bin")"
	[ "$(basename "$bin")" = servefloor ] && name="floor (servefloor)"
	if [ "$i" = 0 ]; then
		args=()
		name="envoyproxy/ratelimit"
	fi
	"${svcPin[@]}" env -i "${env[@]}" REDIS_URL="127.0.0.1:$vport" PORT="$hport" GRPC_PORT=$((hport + 1)) DEBUG_PORT=$((hport + 2)) \
		"$bin" "${args[@]}" >"$out/svc$i.log" 2>&1 &
	svc[i]=$!
	pids+=($!)
	names[i]=$name
	i=$((i + 1))
done
"${svcPin[@]}" "$noop" -listen 127.0.0.1:18099 -grpc 127.0.0.1:18098 >/dev/null 2>&1 &
noopPid=$!
pids+=($!)
sleep 2
for j in "${!svc[@]}"; do
	kill -0 "${svc[j]}" 2>/dev/null || { echo "$0: ${names[j]} did not start:" >&2; cat "$out/svc$j.log" >&2; exit 1; }
done

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); wrk ${wrkArgs[*]}, rlsload ${rlsArgs[*]}, ${dur} each${svcPin[0]+; services on CPU 0, generators on CPU 1}"
printf '%-24s %-5s %10s %9s %9s  %s\n' service load 'req/s' p50 p99 'CPU % of one core: service valkey generator idle'
# leg NAME PROTO SERVICE_PID VALKEY_PID TARGET K: one leg, printed, and
# recorded in $out/legs as "round proto K req/s p50 p99 errors" (times in ms).
leg() {
	local name=$1 proto=$2 sp=$3 vp=$4 target=$5 k=$6
	local s0 v0=0 i0 t0 s1 v1=0 i1 t1 rps p50 p99 errs
	s0=$(cpu "$sp")
	[ -n "$vp" ] && v0=$(cpu "$vp")
	i0=$(idle)
	t0=$(date +%s.%N)
	if [ "$proto" = http ]; then
		/usr/bin/time -f '%U %S' -o "$out/gen" "${genPin[@]}" wrk "${wrkArgs[@]}" -d"$dur" --latency -s "$repo/docs/envoy-bench.lua" "http://$target" >"$out/load" 2>&1
		rps=$(awk '/Requests\/sec/ {print $2}' "$out/load")
		p50=$(awk '$1 == "50%" {print $2}' "$out/load")
		p99=$(awk '$1 == "99%" {print $2}' "$out/load")
		errs=$(grep -E 'Non-2xx|Socket errors' "$out/load" | tr '\n' ' ')
	else
		/usr/bin/time -f '%U %S' -o "$out/gen" "${genPin[@]}" "$rlsload" -addr "$target" "${rlsArgs[@]}" -d "$dur" >"$out/load" 2>&1
		rps=$(sed -n 's/.*: \([0-9]*\) calls\/s.*/\1/p' "$out/load")
		p50=$(sed -n 's/.*p50 \([^,]*\),.*/\1/p' "$out/load")
		p99=$(sed -n 's/.*p99 \([^,]*\),.*/\1/p' "$out/load")
		errs=$(grep -v ', errors 0, over_limit 0' "$out/load" | tr '\n' ' ')
	fi
	t1=$(date +%s.%N)
	s1=$(cpu "$sp")
	[ -n "$vp" ] && v1=$(cpu "$vp")
	i1=$(idle)
	awk -v n="$name" -v p="$proto" -v r="$rps" -v p50="$p50" -v p99="$p99" -v e="$errs" \
		-v s=$((s1 - s0)) -v v=$((v1 - v0)) -v i=$((i1 - i0)) -v t0="$t0" -v t1="$t1" -v g="$(cat "$out/gen")" \
		'BEGIN { w = t1 - t0; split(g, x, " "); printf "%-24s %-5s %10.0f %9s %9s  %3.0f %3.0f %3.0f %3.0f  %s\n", n, p, r, p50, p99, s / w, v / w, 100 * (x[1] + x[2]) / w, i / w, e }'
	awk -v round="$round" -v p="$proto" -v k="$k" -v r="$rps" -v p50="$p50" -v p99="$p99" -v e="$errs" '
		function ms(t, v) { v = t + 0; if (t ~ /us$|µs$/) return v / 1000; if (t ~ /ms$/) return v; if (t ~ /s$/) return v * 1000; return -1 }
		BEGIN { printf "%d %s %d %.0f %.3f %.3f %d\n", round, p, k, r, ms(p50), ms(p99), e != "" }' >>"$out/legs"
}

# summarize FILE N NAME...: for LEGS > 1, each target's medians over the
# rounds (req/s, p50, p99), then each sluice build's ratios to
# envoyproxy/ratelimit's leg of the same round (req/s and p99), their
# medians, and in how many rounds both halves of the goal held (at least
# twice the req/s, at most half the p99); the no-op handler's too.
summarize() {
	local file=$1 n=$2
	shift 2
	awk -v n="$n" -v names="$(printf '%s\t' "$@")" -f "$repo/benchmarks/legs-summary.awk" "$file"
}
# target PROTO K: the leg of target K (0: envoyproxy/ratelimit, 1..: the
# sluice builds, the last: the no-op handler).
target() {
	local proto=$1 k=$2 port=18180
	[ "$proto" = grpc ] && port=18181
	if [ "$k" -lt "${#svc[@]}" ]; then
		leg "${names[k]}" "$proto" "${svc[k]}" "${vk[k]}" "127.0.0.1:$((port + 100 * k))" "$k"
	elif [ "$proto" = http ]; then
		leg "no-op handler" http "$noopPid" "" 127.0.0.1:18099 "$k"
	else
		leg "no-op handler" grpc "$noopPid" "" 127.0.0.1:18098 "$k"
	fi
}
n=$((${#svc[@]} + 1))
for ((round = 0; round < legs; round++)); do
	if [ "$legs" -gt 1 ]; then echo "round $((round + 1)) of $legs"; fi
	for proto in http grpc; do
		# Each round starts one target later, so that no target always
		# follows the same one or runs first.
		for ((k = 0; k < n; k++)); do target "$proto" $(((k + round) % n)); done
	done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$legs" -gt 1 ]; then summarize "$out/legs" "$n" "${names[@]}" "no-op handler"; fi
