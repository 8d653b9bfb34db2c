#!/usr/bin/env bash
# Makes sure Debian's redis-server is installed for the Redis gate tests (each test starts its own
# server on a loopback port; no system service is needed or started).
# Idempotent and quiet: does nothing when redis-server is on the PATH.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "ensure-redis: redis-server is missing and this user cannot install packages (no root, no sudo); install Debian's redis-server package" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq redis-server >/dev/null
if ! command -v redis-server >/dev/null 2>&1; then
  echo "ensure-redis: installing redis-server did not put redis-server on the PATH" >&2
  exit 1
fi
