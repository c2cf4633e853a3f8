#!/bin/sh
# cluster-servercost.sh EVALSTREAM
#
# What Valkey's cluster mode by itself costs a decision, with no Sluice
# client in the way: the same GCRA script calls valkeystore sends (KEYS
# decisions per call, default 16; keys drawn from 100k), written once to a
# file by evalstream (cmd/evalstream) and sent by valkey-cli --pipe (a C
# client writing the whole file as fast as the server reads it) to
#
#   - one server, keys of random slots declared in KEYS (the call
#     valkeystore sends to one server), and the same keys in ARGV to the
#     Cross script (the call it sends to a cluster node for keys of
#     several slots);
#   - a 1-primary Cluster (every slot on one node), keys of random slots
#     to the Cross script (valkeystore's call there);
#   - one server and the 1-primary Cluster, keys of one slot declared in
#     KEYS, and on the Cluster in ARGV to the Cross script;
#   - a 3-primary Cluster, each primary in turn (never two at once), the
#     Cross script with keys of random slots it serves (as many calls to
#     each as to one server), the primaries' figures summed; and the
#     same streams to the three at once (three servers and three clients
#     on this machine's cores),
#
# alternating, ROUNDS times (default 20; every other round backwards),
# CALLS script calls per row (default 3000: this machine's speed changes
# over seconds, so short rows side by side compare best), INTERVAL the
# GCRA interval (default 1us, as sluice bench's rule: a key expires about
# a second after its last take; 1h keeps every key). For each row:
# decisions/s, the server's time in EVALSHA per decision (INFO
# commandstats), its CPU time per decision and its time runnable but
# waiting for a core per decision (schedstat); at the end, for each setup
# its mean, and against one server with keys in KEYS the median over the
# rounds of the ratio of the two rows of a round, and the ratios' range.
# FIFO=1 runs the servers SCHED_FIFO (chrt; root). Valkey's version
# (valkey-server --version) heads the output.
#
# BENCH=1 has valkey-benchmark send the calls of the first six setups
# instead, from 4 connections PIPELINE deep (default 4), keys drawn by
# valkey-benchmark (__rand_int__).
#
# CALLGRIND=1 runs one server and the 1-primary Cluster under valgrind's
# callgrind instead (apt-get install valgrind), once, for the first six
# setups: instructions and simulated cache misses per decision, which do
# not move with the machine's load (CALLS of about 500: callgrind is about
# a hundred times slower).
#
# Starts its servers on PORT..PORT+4 (default 21600) and stops them at the
# end. Linux only.
#
#   (cd benchmarks && go build -o /tmp/evalstream ./cmd/evalstream) && benchmarks/cluster-servercost.sh /tmp/evalstream
set -eu
if [ $# -ne 1 ]; then
	echo "usage: $0 EVALSTREAM" >&2
	exit 2
fi
gen=$1
port=${PORT:-21600}
rounds=${ROUNDS:-20}
calls=${CALLS:-3000}
keys=${KEYS:-16}
interval=${INTERVAL:-1us}
. "$(dirname "$0")/valkey-servers.sh"

one=$port solo=$((port + 1))
c1=$((port + 2)) c2=$((port + 3)) c3=$((port + 4))
callgrind=${CALLGRIND:-0}
bench=${BENCH:-0}
pipeline=${PIPELINE:-4}
start "$one"
start "$solo" cluster
valkey-cli -p "$solo" cluster addslotsrange 0 16383 >/dev/null
cluster_ok "$solo"
if [ "$callgrind" = 0 ] && [ "$bench" = 0 ]; then
	for p in "$c1" "$c2" "$c3"; do start "$p" cluster; done
	yes yes | valkey-cli --cluster create "127.0.0.1:$c1" "127.0.0.1:$c2" "127.0.0.1:$c3" --cluster-replicas 0 >/dev/null
	cluster_ok "$c1" "$c2" "$c3"
fi

# slots PORT: the slot range the node serves, LO-HI.
slots() {
	valkey-cli -p "$1" cluster nodes | awk '/myself/ { print $9 }'
}

# send PORT FILE: pipes FILE to the server and fails unless every reply
# is a success. With BENCH=1, valkey-benchmark sends FILE's kind of call
# instead (bench).
send() {
	if [ "$bench" = 1 ] && [ "$2" != "$dir/load" ]; then
		bench "$@"
		return
	fi
	out=$(valkey-cli -p "$1" --pipe <"$2" 2>&1)
	case $out in
	*"errors: 0,"*) ;;
	*)
		echo "$1 <$2: $out" >&2
		exit 1
		;;
	esac
}

# callgrind_run: with CALLGRIND=1, the servers run under callgrind, which
# counts the instructions they execute and simulates their caches: figures
# that do not move with this machine's load. Each row sends its stream
# twice and counts the second time, when its keys exist (with INTERVAL 1h;
# with 1us they expired in between, as the servers run about a hundred
# times slower under callgrind, and every decision writes a new key).
callgrind_run() {
	send "$one" "$dir/load"
	send "$solo" "$dir/load"
	echo "Valkey: $(valkey-server --version)"
	echo "callgrind: $(valgrind --version), --cache-sim=yes"
	echo
	echo "| setup ($keys decisions per call, $calls calls, interval $interval) | instructions per decision | L1 data misses per decision | last-level misses per decision |"
	echo "|---|---:|---:|---:|"
	ir_row "one server, keys of random slots in KEYS" "$one" "$dir/one"
	ir_row "one server, keys of random slots in ARGV (Cross script)" "$one" "$dir/cross"
	ir_row "1-primary Cluster, keys of random slots in ARGV (Cross script)" "$solo" "$dir/cross"
	ir_row "one server, keys of one slot in KEYS" "$one" "$dir/one-tag"
	ir_row "1-primary Cluster, keys of one slot in KEYS" "$solo" "$dir/one-tag"
	ir_row "1-primary Cluster, keys of one slot in ARGV (Cross script)" "$solo" "$dir/cross-tag"
}

# ir_row LABEL PORT FILE: sends FILE twice, and prints callgrind's counts
# per decision for the second time (callgrind_control zeroes them before
# and dumps them after).
ir_row() {
	pid=$(cat "$dir/$2.pid")
	send "$2" "$3"
	callgrind_control -z "$pid" >/dev/null 2>&1
	send "$2" "$3"
	callgrind_control -d "$pid" >/dev/null 2>&1
	n=$((calls * keys))
	# shellcheck disable=SC2012
	f=$(ls -t "$dir/$2"/callgrind.out* | head -1)
	awk -v label="$1" -v n="$n" '
		/^events:/ { for (i = 2; i <= NF; i++) ev[$i] = i }
		/^summary:/ {
			printf "| %s | %.0f | %.1f | %.2f |\n", label, $ev["Ir"] / n,
				($ev["D1mr"] + $ev["D1mw"]) / n, ($ev["DLmr"] + $ev["DLmw"]) / n
		}' "$f"
}

# bench PORT FILE: valkey-benchmark sends CALLS calls of FILE's script
# and form (keys in KEYS or in ARGV), from 4 connections PIPELINE deep
# (default 4), keys drawn by valkey-benchmark (callcost:__rand_int__,
# callcost:{0}:__rand_int__ for keys of one slot, over 100k), the records
# from evalstream -records (-x: the last argument, binary).
bench() {
	sha=$(sed -n 5p "$2" | tr -d '\r')
	k=callcost:__rand_int__
	case $2 in *-tag) k="callcost:{0}:__rand_int__" ;; esac
	ks=$(i=0; while [ $i -lt "$keys" ]; do printf '%s ' "$k"; i=$((i + 1)); done)
	if [ "$(sed -n 7p "$2" | tr -d '\r')" = 0 ]; then
		set -- "$1" EVALSHA "$sha" 0 "$keys" "$keys"
	else
		set -- "$1" EVALSHA "$sha" "$keys"
	fi
	p=$1
	shift
	# shellcheck disable=SC2086
	out=$(valkey-benchmark -p "$p" -c 4 -P "$pipeline" -n "$calls" -r 100000 -q -x "$@" $ks <"$dir/records" 2>&1)
	case $out in
	*rror*)
		echo "valkey-benchmark on $p: $out" >&2
		exit 1
		;;
	esac
}

# The streams, written before anything is measured.
g() { "$gen" -keys "$keys" -interval "$interval" "$@"; }
g -load >"$dir/load"
g -records >"$dir/records"
g -warm -form one >"$dir/warm"
g -warm -form one -tags 1 >"$dir/warm-tag"
g -warm -form cross >"$dir/warm-cross"
g -form one -calls "$calls" >"$dir/one"
g -form cross -calls "$calls" >"$dir/cross"
g -form one -tags 1 -calls "$calls" >"$dir/one-tag"
g -form cross -tags 1 -calls "$calls" >"$dir/cross-tag"
if [ "$callgrind" = 1 ]; then
	callgrind_run
	exit 0
fi
for p in "$one" "$solo"; do
	send "$p" "$dir/load"
	send "$p" "$dir/warm-tag"
done
send "$one" "$dir/warm"
send "$solo" "$dir/warm-cross"
setups="1 2 3 4 5 6 7 8"
if [ "$bench" = 1 ]; then
	setups="1 2 3 4 5 6" # valkey-benchmark cannot draw the keys of one primary
else
	for p in "$c1" "$c2" "$c3"; do
		s=$(slots "$p")
		g -warm -form cross -slots "$s" >"$dir/warm-$p"
		g -form cross -slots "$s" -calls "$calls" >"$dir/cross-$p"
		send "$p" "$dir/load"
		send "$p" "$dir/warm-$p"
	done
fi

# stats PORT...: EVALSHA calls and µs (INFO commandstats), CPU and
# run-queue wait in ns (schedstat), summed over the servers.
stats() {
	calls=0 usec=0
	for p in "$@"; do
		set -- $(valkey-cli -p "$p" info commandstats | tr -d '\r' | awk -F'[=,]' '/^cmdstat_evalsha:/ { print $2, $4 }')
		calls=$((calls + ${1:-0})) usec=$((usec + ${2:-0}))
	done
	echo "$calls $usec"
}

# run LABEL PORT FILE [PORT FILE]...: sends each FILE to its PORT in turn
# and prints the row of their sums. With together=1, sends them all at
# once instead.
run() {
	label=$1
	shift
	a0=0 a1=0 s0="0 0" s1="0 0" t=0
	if [ "${together:-0}" = 1 ]; then
		ports=$(echo "$@" | awk '{ for (i = 1; i <= NF; i += 2) printf "%s ", $i }')
		# shellcheck disable=SC2086
		a0="$a0 $(stats $ports)" s0="$s0 $(sched $ports)" t0=$(date +%s%N)
		bg=""
		while [ $# -gt 0 ]; do
			send "$1" "$2" &
			bg="$bg $!"
			shift 2
		done
		for p in $bg; do wait "$p"; done
		# shellcheck disable=SC2086
		t1=$(date +%s%N) a1="$a1 $(stats $ports)" s1="$s1 $(sched $ports)" t=$((t1 - t0))
	fi
	while [ $# -gt 0 ]; do
		b=$(stats "$1") c=$(sched "$1") t0=$(date +%s%N)
		send "$1" "$2"
		t1=$(date +%s%N) e=$(stats "$1") d=$(sched "$1")
		a0="$a0 $b" a1="$a1 $e" s0="$s0 $c" s1="$s1 $d" t=$((t + t1 - t0))
		shift 2
	done
	echo "$a0|$a1|$s0|$s1|$t" | awk -F'|' -v label="$label" -v keys="$keys" -v round="$round" '
		function sum(s, k,   v, n, i, x) { n = split(s, v, " "); x = 0; for (i = k; i <= n; i += 2) x += v[i]; return x }
		{
			n = (sum($2, 2) - sum($1, 2)) * keys
			usec = (sum($2, 3) - sum($1, 3)) / n
			cpu = (sum($4, 1) - sum($3, 1)) / 1000 / n
			wait = (sum($4, 2) - sum($3, 2)) / 1000 / n
			printf "| %s | %.0f/s | %.2f | %.2f | %.2f |\n", label, n / ($5 / 1e9), usec, cpu, wait
			printf "%s\t%s\t%f\t%f\n", round, label, usec, cpu >> "'"$dir/rows"'"
		}'
}

echo "Valkey: $(valkey-server --version)"
echo "load before: $(uptime)"
echo
echo "| setup ($keys decisions per call, interval $interval) | decisions/s | server µs per decision (commandstats) | server CPU µs per decision | waiting for a core, µs per decision |"
echo "|---|---:|---:|---:|---:|"
# row I: the round's row I.
row() {
	case $1 in
	1) run "one server, keys of random slots in KEYS" "$one" "$dir/one" ;;
	2) run "one server, keys of random slots in ARGV (Cross script)" "$one" "$dir/cross" ;;
	3) run "1-primary Cluster, keys of random slots in ARGV (Cross script)" "$solo" "$dir/cross" ;;
	4) run "one server, keys of one slot in KEYS" "$one" "$dir/one-tag" ;;
	5) run "1-primary Cluster, keys of one slot in KEYS" "$solo" "$dir/one-tag" ;;
	6) run "1-primary Cluster, keys of one slot in ARGV (Cross script)" "$solo" "$dir/cross-tag" ;;
	7) run "3-primary Cluster, one primary at a time, keys of random slots in ARGV (Cross script)" \
		"$c1" "$dir/cross-$c1" "$c2" "$dir/cross-$c2" "$c3" "$dir/cross-$c3" ;;
	8)
		together=1
		run "3-primary Cluster, the three at once, keys of random slots in ARGV (Cross script)" \
			"$c1" "$dir/cross-$c1" "$c2" "$dir/cross-$c2" "$c3" "$dir/cross-$c3"
		together=0
		;;
	esac
}
for round in $(seq "$rounds"); do
	# Every other round runs its rows backwards, so that no setup always
	# follows the same one.
	order=$setups
	if [ $((round % 2)) = 0 ]; then order=$(echo "$setups" | awk '{ for (i = NF; i > 0; i--) printf "%s ", $i }'); fi
	for i in $order; do row "$i"; done
done
echo
echo "load after: $(uptime)"
echo
# Each setup: its mean over the rounds, and against one server with keys
# in KEYS: the median over the rounds of the ratio to that row of the same
# round, and the ratios' range.
echo "| setup ($rounds rounds) | mean server µs per decision (commandstats) | mean server CPU µs per decision | commandstats against one server, keys in KEYS: median (range) | CPU against one server, keys in KEYS: median (range) |"
echo "|---|---:|---:|---:|---:|"
awk -F'\t' '
	function med(a, n,   i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
		return sprintf("%.2fx (%.2f-%.2f)", n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2, a[1], a[n])
	}
	!($2 in seen) { seen[$2] = 1; order[++nl] = $2 }
	{ u[NR] = $3; c[NR] = $4; r[NR] = $1; l[NR] = $2; su[$2] += $3; sc[$2] += $4 }
	$2 == "one server, keys of random slots in KEYS" { bu[$1] = $3; bc[$1] = $4 }
	END {
		for (i = 1; i <= NR; i++) { k = ++cnt[l[i]]; ru[l[i], k] = u[i] / bu[r[i]]; rc[l[i], k] = c[i] / bc[r[i]] }
		for (j = 1; j <= nl; j++) {
			L = order[j]
			for (k = 1; k <= cnt[L]; k++) { a[k] = ru[L, k]; b[k] = rc[L, k] }
			printf "| %s | %.2f | %.2f | %s | %s |\n", L, su[L] / cnt[L], sc[L] / cnt[L], med(a, cnt[L]), med(b, cnt[L])
		}
	}' "$dir/rows"
