#!/usr/bin/env bash
# test.sh is the project's test command: it installs Valkey 8 when
# valkey-server is missing, then vets and runs every test with the race
# detector against real valkey-server processes that the tests start
# themselves. It never skips for lack of Valkey: it fails. It also installs
# the other tools the tests use (proxies, Chromium, promtool, Redocly CLI,
# helm and kubeconform).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-valkey.sh
bash scripts/install-systemd-analyze.sh
bash scripts/install-proxies.sh
bash scripts/install-chromium.sh
bash scripts/install-promtool.sh
bash scripts/install-redocly.sh
bash scripts/install-helm.sh
export PATH="$PATH:/usr/sbin:/usr/bin"
valkey-server --version

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
echo "== go vet"
# Every module: the library (.), the service (cmd/sluice), sluiceprom,
# sluiceotel and grpclimit here; redisstore and benchmarks below. go.work
# ties them.
for m in . cmd/sluice sluiceprom sluiceotel grpclimit; do (cd "$m" && go vet ./...); done
go vet -tags failover ./valkeystore ./cmd/sluice/internal/failover
echo "== go test"
# One go test for the five modules, so that their packages share the cores.
go test -race -shuffle=on -count=1 -timeout 15m ./... ./cmd/sluice/... ./sluiceprom/... ./sluiceotel/... ./grpclimit/... "$@"
echo "== failover suite (a 3+3 Valkey Cluster: replica and primary killed, CLUSTER FAILOVER, reshard, with batching per node; about 25s)"
go test -race -count=1 -p 1 -timeout 5m -tags failover -run 'TestClusterFailover' ./valkeystore ./cmd/sluice/internal/failover
echo "== redisstore module (the store on go-redis: standalone, Cluster, Sentinel)"
(cd redisstore && go vet ./... && go test -race -shuffle=on -count=1 -timeout 5m ./...)
echo "== benchmarks module (vet, and its tests: the harness, not the measurements)"
(cd benchmarks && go vet ./... && go test -count=1 -timeout 5m ./...)
echo "== compat/envoy (envoyproxy/ratelimit's own integration tests and scripts against sluice serve; about 2 minutes, one run at a time: upstream's fixed ports)"
(cd compat/envoy && go vet ./... && go test -count=1 -timeout 10m -v ./...)
