#!/usr/bin/env bash
# install-helm.sh installs helm and kubeconform, at the versions pinned
# below, from the Go module proxy (go install) when they are missing or at
# another version, and downloads the two modules whose files the chart's
# tests turn into kubeconform's schemas: Kubernetes' OpenAPI document
# (k8s.io/kubernetes, api/openapi-spec/swagger.json) and prometheus-operator's
# CRDs (ServiceMonitor, PrometheusRule). The Helm chart tests
# (cmd/sluice/internal/deploytest/helm_test.go) read these pins and fail,
# never skip, when a tool is missing.
set -euo pipefail

helm_module=helm.sh/helm/v3/cmd/helm@v3.22.0
kubeconform_module=github.com/yannh/kubeconform/cmd/kubeconform@v0.8.0
kubernetes_schemas=k8s.io/kubernetes@v1.37.2
prometheus_operator_crds=github.com/prometheus-operator/prometheus-operator@v0.85.0

bin="$(go env GOBIN)"
[ -n "$bin" ] || bin="$(go env GOPATH)/bin"

# installed BINARY MODULE@VERSION: whether bin/BINARY was built from it.
installed() {
  [ -x "$bin/$1" ] || return 1
  local want_path="${2%@*}" want_version="${2#*@}"
  go version -m "$bin/$1" 2>/dev/null | awk -v p="$want_path" -v v="$want_version" '
    $1 == "path" && $2 == p { path = 1 }
    $1 == "mod" && $3 == v { version = 1 }
    END { exit !(path && version) }'
}

for tool in "helm $helm_module" "kubeconform $kubeconform_module"; do
  set -- $tool
  if ! installed "$1" "$2"; then
    echo "install-helm: go install $2" >&2
    GOWORK=off go install "$2"
  fi
  installed "$1" "$2" || { echo "install-helm: $bin/$1 is not $2 after go install" >&2; exit 1; }
done

# The schema sources, into the module cache (a no-op when there).
(cd "$(mktemp -d)" && GOWORK=off go mod download "$kubernetes_schemas" "$prometheus_operator_crds")
