#!/usr/bin/env bash
# install-chromium.sh installs Debian's chromium, the headless browser the
# dashboard's tests drive, when it is not already on PATH. It fails loudly:
# the dashboard tests never skip because the browser is missing.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-chromium: chromium is missing and this is not root;" >&2
  echo "  install it with: apt-get install chromium" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq -o Dpkg::Use-Pty=0 >/dev/null || apt-get update
apt-get install -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends chromium fonts-liberation >/dev/null
command -v chromium >/dev/null || { echo "install-chromium: chromium still missing after apt-get" >&2; exit 1; }
