#!/usr/bin/env bash
# install-proxies.sh installs nginx and Caddy from Debian when either is
# missing: deploy's end-to-end tests start real nginx and Caddy processes
# with the configurations shipped in deploy/. The packages' own services are
# stopped where an init runs them: the tests start their own processes on
# free ports. It fails loudly; the tests never skip for lack of a proxy.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/usr/bin"

missing=()
command -v nginx >/dev/null 2>&1 || missing+=(nginx)
command -v caddy >/dev/null 2>&1 || missing+=(caddy)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-proxies: ${missing[*]} missing and this is not root;" >&2
  echo "  install with: apt-get install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq -o Dpkg::Use-Pty=0 >/dev/null || apt-get update
apt-get install -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends "${missing[@]}" >/dev/null
(service nginx stop >/dev/null 2>&1 || true)
(service caddy stop >/dev/null 2>&1 || true)
for p in "${missing[@]}"; do
  command -v "$p" >/dev/null || { echo "install-proxies: $p still missing after apt-get" >&2; exit 1; }
done
nginx -v
caddy version
