#!/usr/bin/env bash
# install-valkey.sh installs Valkey 8 (valkey-server, valkey-cli, valkey-benchmark)
# from Debian's bookworm-backports when valkey-server is not already on PATH.
# It fails loudly: the test suite never skips because Valkey is missing.
set -euo pipefail

if command -v valkey-server >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-valkey: valkey-server is missing and this is not root;" >&2
  echo "  install it with: apt-get install -t bookworm-backports valkey-server valkey-tools" >&2
  exit 1
fi
if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
  cat > /etc/apt/sources.list.d/bookworm-backports.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq -o Dpkg::Use-Pty=0 >/dev/null || apt-get update
apt-get install -y -qq -o Dpkg::Use-Pty=0 -t bookworm-backports valkey-server valkey-tools >/dev/null
# The package starts a system service on Debian images that run an init; the
# tests start their own servers on free ports, so stop it where it runs.
(service valkey-server stop >/dev/null 2>&1 || true)
command -v valkey-server >/dev/null || { echo "install-valkey: valkey-server still missing after apt-get" >&2; exit 1; }
valkey-server --version
