# valkey-servers.sh: sourced by the benchmark scripts that start their own
# Valkey servers (cluster-bench.sh, cluster-callcost.sh). It makes a
# temporary directory ($dir), stops every server it started and removes
# $dir when the script exits (a signal ends the script through the EXIT
# trap, not only the command it ran), and defines:
#
#   start PORT [cluster]  a valkey-server on PORT (cluster mode with
#                         "cluster"), its pid in $dir/PORT.pid, or the end
#                         of its log and exit 1 when it does not answer
#                         within 2s (30s under CALLGRIND; a port in use); FIFO=1 runs it
#                         SCHED_FIFO (chrt; needs root). A port below
#                         22768 keeps both it and its cluster bus port
#                         (+10000) out of Linux's default range of local
#                         ports (32768-60999), which a client's connection
#                         may hold. CALLGRIND=1 runs it under valgrind's
#                         callgrind with its cache simulation, its output
#                         in $dir/PORT/callgrind.out*.
#   cluster_ok PORT...    waits until each node reports cluster_state:ok.
#   sched PORT...         the servers' CPU time and run-queue wait (runnable
#                         but waiting for a core), in ns, summed over their
#                         threads (/proc/PID/task/*/schedstat; Linux).

dir=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	sleep 0.2
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

start() {
	mkdir -p "$dir/$1"
	extra=""
	if [ "${2:-}" = cluster ]; then
		extra="--cluster-enabled yes --cluster-config-file $dir/$1/nodes.conf --cluster-node-timeout 5000"
	fi
	wait=20
	if [ "${CALLGRIND:-0}" = 1 ]; then
		# The pid is valgrind's own, which callgrind_control addresses;
		# valgrind is slow to start.
		# shellcheck disable=SC2086
		valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file="$dir/$1/callgrind.out" \
			valkey-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/$1" \
			--daemonize no --logfile "$dir/$1/log" $extra >/dev/null 2>"$dir/$1/valgrind.log" &
		echo $! >"$dir/$1.pid"
		wait=300
	else
		# shellcheck disable=SC2086
		valkey-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/$1" \
			--daemonize yes --logfile "$dir/$1/log" --pidfile "$dir/$1.pid" $extra
	fi
	up=0
	for _ in $(seq "$wait"); do
		[ -s "$dir/$1.pid" ] && valkey-cli -p "$1" ping >/dev/null 2>&1 && up=1 && break
		sleep 0.1
	done
	if [ -s "$dir/$1.pid" ]; then pids="$pids $(cat "$dir/$1.pid")"; fi
	if [ $up = 0 ]; then
		echo "valkey-server on port $1 did not start:" >&2
		tail -3 "$dir/$1/valgrind.log" >&2 2>/dev/null || true
		tail -3 "$dir/$1/log" >&2
		exit 1
	fi
	if [ "${FIFO:-0}" = 1 ]; then
		chrt -a -f -p 1 "$(cat "$dir/$1.pid")"
	fi
}

cluster_ok() {
	for p in "$@"; do
		for _ in $(seq 100); do
			valkey-cli -p "$p" cluster info | grep -q 'cluster_state:ok' && break
			sleep 0.1
		done
	done
}

sched() {
	cpu=0 rq=0
	for p in "$@"; do
		for f in /proc/"$(cat "$dir/$p.pid")"/task/*/schedstat; do
			read -r c w _ <"$f"
			cpu=$((cpu + c)) rq=$((rq + w))
		done
	done
	echo "$cpu $rq"
}
