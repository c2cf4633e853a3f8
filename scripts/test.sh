#!/usr/bin/env bash
# test.sh is the project's test command: it installs Valkey 8 when
# valkey-server is missing, then vets and runs every test with the race
# detector against real valkey-server processes that the tests start
# themselves. It never skips for lack of Valkey: it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-valkey.sh
bash scripts/install-systemd-analyze.sh
bash scripts/install-proxies.sh
bash scripts/install-chromium.sh
bash scripts/install-promtool.sh
export PATH="$PATH:/usr/sbin:/usr/bin"
valkey-server --version

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
echo "== go vet"
go vet ./...
go vet -tags failover ./valkeystore
echo "== go test"
go test -race -shuffle=on -count=1 -timeout 15m ./... "$@"
echo "== failover suite (a 3+3 Valkey Cluster: replica and primary killed, CLUSTER FAILOVER, reshard, with batching per node; about 25s)"
go test -race -count=1 -timeout 5m -tags failover -run 'TestClusterFailover' ./valkeystore
echo "== redisstore module (the store on go-redis: standalone, Cluster, Sentinel)"
(cd redisstore && go vet ./... && go test -race -shuffle=on -count=1 -timeout 5m ./...)
echo "== benchmarks module (vet, and its tests: the harness, not the measurements)"
(cd benchmarks && go vet ./... && go test -count=1 -timeout 5m ./...)
