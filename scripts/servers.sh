#!/usr/bin/env bash
# Install and start (or stop) the real servers the tests talk to, as plain
# processes on loopback ports in temporary directories (no Docker).
#
#   scripts/servers.sh start STATEDIR   install what is missing, start what is
#                                       not configured yet and write
#                                       STATEDIR/env (export lines)
#   scripts/servers.sh stop STATEDIR    stop exactly what start started and
#                                       remove its temporary directories
#
# This script only installs; starting, readiness, the env file and stopping
# are Go, in internal/testserver (testserver.Up and testserver.Down, run by
# internal/testserver/cmd/testservers), the package that also starts the
# private servers single tests own.
#
# A RATELIMIT_* variable that is already set names a server that runs, and
# that server is neither installed nor started:
#   RATELIMIT_REDIS_ADDR           redis-server 7 (127.0.0.1:16379 or next free)
#   RATELIMIT_REDIS_CLUSTER_ADDRS  3-master Redis Cluster (17001-17003 or next free)
#   RATELIMIT_VALKEY_ADDR          valkey-server if on PATH (16380), else the Redis above
#   RATELIMIT_POSTGRES_URL         throwaway PostgreSQL cluster (15432)
#   RATELIMIT_DYNAMODB_ENDPOINT    dynalite, pinned in scripts/dynalite (18000)
#   RATELIMIT_CHROMIUM             not a server: the headless browser the
#                                  /compare page test drives (Debian's chromium)
#
# Missing redis-server, PostgreSQL, Node.js or chromium are installed with
# apt-get, dynalite with npm ci. RATELIMIT_SERVER_TIMEOUT (seconds, default
# 60) bounds each wait.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# useradd (run by testserver.Up as root) lives in sbin, which a bare PATH may lack.
PATH=$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin
export PATH

log() { echo "servers.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
  echo "usage: $0 start|stop STATEDIR" >&2
  exit 2
}

# as_root CMD...: run CMD as root (directly, or through sudo).
as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    die "need root to run: $*"
  fi
}

# apt_install PKG...: install Debian packages, running apt-get update only
# when the first attempt fails. A temporary policy-rc.d keeps the packages'
# own services (a system Redis on 6379, PostgreSQL on 5432) from starting.
apt_install() {
  log "installing $* with apt-get"
  local policy=/usr/sbin/policy-rc.d added="" rc=0
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -y -q
    -o DPkg::Lock::Timeout=300 install --no-install-recommends "$@")
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod 755 "$policy"
    added=1
  fi
  if ! as_root "${apt[@]}" >&2; then
    { as_root apt-get -q -o DPkg::Lock::Timeout=300 update && as_root "${apt[@]}"; } >&2 || rc=$?
  fi
  if [ -n "$added" ]; then as_root rm -f "$policy"; fi
  [ "$rc" -eq 0 ] || die "apt-get install $* failed"
}

# ensure_dynalite: npm ci the pinned dynalite into scripts/dynalite, once per
# lockfile (a stamp records which), under a lock for concurrent runs.
ensure_dynalite() {
  local pkg=$ROOT/scripts/dynalite stamp want
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm
  fi
  stamp=$pkg/node_modules/.ratelimit-lock-sha256
  want=$(sha256sum "$pkg/package-lock.json" | cut -d' ' -f1)
  (
    flock -w 600 9 || die "timed out waiting for $pkg/.install.lock"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ ! -f "$pkg/node_modules/dynalite/cli.js" ]; then
      log "installing dynalite with npm ci"
      # --ignore-scripts: classic-level ships prebuilt binaries, and an
      # in-memory dynalite never opens LevelDB on disk anyway.
      (cd "$pkg" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2) ||
        die "npm ci in $pkg failed"
      echo "$want" >"$stamp"
    fi
  ) 9>"$pkg/.install.lock"
}

# install: install what the servers to be started need.
install() {
  if [ -z "${RATELIMIT_REDIS_ADDR:-}" ] || [ -z "${RATELIMIT_REDIS_CLUSTER_ADDRS:-}" ]; then
    command -v redis-server >/dev/null 2>&1 || command -v valkey-server >/dev/null 2>&1 ||
      apt_install redis-server
  fi
  if [ -z "${RATELIMIT_POSTGRES_URL:-}" ]; then
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null 2>&1 ||
      apt_install postgresql
  fi
  if [ -z "${RATELIMIT_DYNAMODB_ENDPOINT:-}" ]; then
    ensure_dynalite
  fi
  if [ -z "${RATELIMIT_CHROMIUM:-}" ]; then
    command -v chromium >/dev/null 2>&1 || apt_install chromium
  fi
}

[ $# -eq 2 ] || usage
case $1 in
  start) install ;;
  stop) ;;
  *) usage ;;
esac
command -v go >/dev/null 2>&1 || die "go is not on PATH (the servers are started by Go code)"
mkdir -p "$2"
STATE=$(cd "$2" && pwd)
cd "$ROOT"
exec go run ./internal/testserver/cmd/testservers "$1" "$STATE"
