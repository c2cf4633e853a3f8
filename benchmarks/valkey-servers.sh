# valkey-servers.sh: sourced by the benchmark scripts that start their own
# Valkey servers (cluster-bench.sh, cluster-callcost.sh). It makes a
# temporary directory ($dir), stops every server it started and removes
# $dir when the script exits (a signal ends the script through the EXIT
# trap, not only the command it ran), and defines:
#
#   start PORT [cluster]  a valkey-server on PORT (cluster mode with
#                         "cluster"), its pid in $dir/PORT.pid; FIFO=1 runs
#                         it SCHED_FIFO (chrt; needs root).
#   cluster_ok PORT...    waits until each node reports cluster_state:ok.

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
	# shellcheck disable=SC2086
	valkey-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/$1" \
		--daemonize yes --logfile "$dir/$1/log" --pidfile "$dir/$1.pid" $extra
	for _ in $(seq 20); do
		[ -s "$dir/$1.pid" ] && valkey-cli -p "$1" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	pids="$pids $(cat "$dir/$1.pid")"
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
