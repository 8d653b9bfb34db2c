#!/usr/bin/env bash
# Makes sure PostgreSQL's server binaries (initdb, pg_ctl, postgres) are installed for the
# PostgreSQL store tests: each test process starts its own throwaway cluster on a loopback port
# (test/support/postgresServer.ts), so no system service is needed or started.
# Debian puts them in /usr/lib/postgresql/<version>/bin, off the PATH; the tests look there.
# Idempotent and quiet: does nothing when initdb is found.
set -euo pipefail
if command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "ensure-postgres: PostgreSQL is missing and this user cannot install packages (no root, no sudo); install Debian's postgresql package" >&2
  exit 1
fi
# Debian's package would create and start a "main" cluster on port 5432 that nothing here uses;
# postgresql-common reads this before it is installed (only written when it is not there yet).
if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
  $SUDO mkdir -p /etc/postgresql-common
  echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.conf >/dev/null
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq postgresql >/dev/null
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && ! command -v initdb >/dev/null 2>&1; then
  echo "ensure-postgres: installing postgresql did not provide initdb (looked on the PATH and in /usr/lib/postgresql/*/bin)" >&2
  exit 1
fi
