#!/usr/bin/env bash
# install-redocly.sh installs Redocly CLI (the npm package @redocly/cli, at
# the version pinned below) with Debian's nodejs and npm, when redocly is
# not already on PATH at that version. The HTTP API test lints
# docs/openapi.yaml with it and fails, never skips, when it is missing.
set -euo pipefail

version=2.77.0
if command -v redocly >/dev/null 2>&1 && [ "$(redocly --version 2>/dev/null)" = "$version" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-redocly: npm is missing; install it with: apt-get install nodejs npm" >&2
  exit 1
fi
if [ "$(id -u)" = 0 ]; then
  npm install --global --no-audit --no-fund --loglevel=error "@redocly/cli@$version" >/dev/null
else
  echo "install-redocly: redocly $version is missing and this is not root;" >&2
  echo "  install it with: npm install --global @redocly/cli@$version" >&2
  exit 1
fi
command -v redocly >/dev/null || { echo "install-redocly: redocly still missing after npm install" >&2; exit 1; }
