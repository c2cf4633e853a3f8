#!/usr/bin/env bash
# install-promtool.sh installs promtool (Debian's prometheus package), which
# the tests use to check the alert rules in deploy/prometheus and the
# metrics sluice serve exposes, when it is not already on PATH. It fails
# loudly: those tests never skip because promtool is missing.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-promtool: promtool is missing and this is not root;" >&2
  echo "  install it with: apt-get install prometheus" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq -o Dpkg::Use-Pty=0 >/dev/null || apt-get update
apt-get install -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends prometheus >/dev/null
# The package may start a Prometheus server where an init runs; the tests
# need only promtool.
(service prometheus stop >/dev/null 2>&1 || true)
command -v promtool >/dev/null || { echo "install-promtool: promtool still missing after apt-get" >&2; exit 1; }
