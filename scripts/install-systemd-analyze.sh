#!/usr/bin/env bash
# install-systemd-analyze.sh installs systemd-analyze (Debian's systemd
# package) when it is missing: deploy's tests check the shipped unit with
# `systemd-analyze verify`. Nothing is started. It fails loudly.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/usr/bin"
if command -v systemd-analyze >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-systemd-analyze: systemd-analyze is missing and this is not root;" >&2
  echo "  install it with: apt-get install systemd" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq -o Dpkg::Use-Pty=0 >/dev/null || apt-get update
apt-get install -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends systemd >/dev/null
command -v systemd-analyze >/dev/null || { echo "install-systemd-analyze: still missing after apt-get" >&2; exit 1; }
