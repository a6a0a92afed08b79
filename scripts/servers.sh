#!/usr/bin/env bash
# Start or stop the real servers the tests talk to, as plain processes on
# loopback ports in temporary directories (no Docker).
#
#   scripts/servers.sh start STATEDIR   start what is not configured yet and
#                                       write STATEDIR/env (export lines)
#   scripts/servers.sh stop STATEDIR    stop exactly what start started and
#                                       remove its temporary directories
#
# A RATELIMIT_* variable that is already set names a server that runs, and
# that server is not started:
#   RATELIMIT_REDIS_ADDR           redis-server 7 (127.0.0.1:16379 or next free)
#   RATELIMIT_REDIS_CLUSTER_ADDRS  3-master Redis Cluster (17001-17003 or next free)
#   RATELIMIT_VALKEY_ADDR          valkey-server if on PATH (16380), else the Redis above
#   RATELIMIT_POSTGRES_URL         throwaway PostgreSQL cluster (15432)
#   RATELIMIT_DYNAMODB_ENDPOINT    dynalite, pinned in scripts/dynalite (18000)
#   RATELIMIT_CHROMIUM             not a server: the headless browser the
#                                  /compare page test drives (Debian's chromium)
#
# Missing redis-server, PostgreSQL or chromium are installed with apt-get,
# dynalite with npm ci. RATELIMIT_SERVER_TIMEOUT (seconds, default 60) bounds each wait.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TIMEOUT=${RATELIMIT_SERVER_TIMEOUT:-60}
# runuser and useradd live in sbin, which a bare PATH may lack.
PATH=$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin

log() { echo "servers.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
  echo "usage: $0 start|stop STATEDIR" >&2
  exit 2
}

# ---------------------------------------------------------------- helpers

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

# port_in_use PORT: true when something accepts connections on 127.0.0.1:PORT
# (or does not answer within a second: a listener with a full backlog).
port_in_use() {
  local rc=0
  # shellcheck disable=SC2016 # $1 expands in the inner bash
  timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null || rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]
}

USED_PORTS=" "
# free_port BASE [BUS]: print the first port >= BASE that is free and not yet
# taken by this run; with BUS, PORT+10000 (Redis Cluster's bus) must be free too.
free_port() {
  local p=$1 bus=${2:-}
  for ((; p < $1 + 500; p++)); do
    case $USED_PORTS in *" $p "*) continue ;; esac
    port_in_use "$p" && continue
    if [ -n "$bus" ]; then port_in_use $((p + 10000)) && continue; fi
    echo "$p"
    return 0
  done
  die "no free port in $1-$(($1 + 499))"
}

# record LINE: remember something to undo at stop (a pid, a data dir).
record() { echo "$*" >>"$STATE/started"; }

# show_log FILE: print a server's log to stderr, to explain a failure.
show_log() {
  log "---- $1"
  tail -n 50 "$1" >&2 2>/dev/null || true
  log "----"
}

# alive PID: true while the process runs (a zombie left for a non-reaping
# init to collect counts as gone).
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [ "$(sed -E 's/.*\) (.).*/\1/' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# ------------------------------------------------------------------ browser

# ensure_browser: set RATELIMIT_CHROMIUM to Debian's chromium, installing it
# if missing. It runs only headless, started by the test that needs it.
ensure_browser() {
  if [ -n "$RATELIMIT_CHROMIUM" ]; then
    log "browser: using RATELIMIT_CHROMIUM=$RATELIMIT_CHROMIUM"
    return 0
  fi
  if ! command -v chromium >/dev/null 2>&1; then
    apt_install chromium
  fi
  RATELIMIT_CHROMIUM=$(command -v chromium) || die "chromium not found after installing it"
}

# --------------------------------------------------------------- redis-like

# ensure_redis: install redis-server (which brings redis-cli) if missing.
ensure_redis() {
  command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 && return 0
  apt_install redis-server redis-tools
}

# wait_redis CLI PORT PID LOG: wait until the server with that pid answers on
# PORT. Comparing INFO's process_id tells our server from another one that
# holds the port. Returns 1 if the process died first, 2 on time-out.
wait_redis() {
  local cli=$1 port=$2 pid=$3 deadline=$((SECONDS + TIMEOUT))
  while ((SECONDS < deadline)); do
    alive "$pid" || return 1
    if "$cli" -h 127.0.0.1 -p "$port" INFO server 2>/dev/null | tr -d '\r' | grep -qx "process_id:$pid"; then
      return 0
    fi
    sleep 0.1
  done
  return 2
}

# start_redis NAME BIN CLI BASEPORT DIR [ARGS...]: start a Redis-compatible
# server on the first free port from BASEPORT, retrying on a port taken in
# the meantime. Sets PORT.
start_redis() {
  local name=$1 bin=$2 cli=$3 base=$4 dir=$5 bus="" pid rc
  shift 5
  case " $* " in *" --cluster-enabled yes "*) bus=1 ;; esac
  mkdir -p "$dir"
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    PORT=$(free_port "$base" $bus)
    "$bin" --bind 127.0.0.1 --port "$PORT" --dir "$dir" --save '' --appendonly no \
      --daemonize no --logfile '' "$@" </dev/null >"$dir/server.log" 2>&1 &
    pid=$!
    record "pid $pid $name"
    rc=0
    wait_redis "$cli" "$PORT" "$pid" || rc=$?
    if [ "$rc" -eq 0 ]; then
      USED_PORTS+="$PORT "
      log "$name: 127.0.0.1:$PORT (pid $pid)"
      return 0
    fi
    kill "$pid" 2>/dev/null || true
    if [ "$rc" -eq 1 ] && grep -qi 'address already in use' "$dir/server.log"; then
      log "$name: port $PORT was taken, trying another"
      base=$((PORT + 1))
      continue
    fi
    show_log "$dir/server.log"
    [ "$rc" -eq 1 ] && die "$name exited before it answered on 127.0.0.1:$PORT"
    die "$name did not answer on 127.0.0.1:$PORT within ${TIMEOUT}s"
  done
  die "$name: could not find a free port from $4"
}

start_standalone_redis() {
  ensure_redis
  start_redis redis redis-server redis-cli 16379 "$TMP/redis"
  RATELIMIT_REDIS_ADDR=127.0.0.1:$PORT
}

start_valkey() {
  local cli=valkey-cli
  command -v "$cli" >/dev/null 2>&1 || cli=redis-cli
  start_redis valkey valkey-server "$cli" 16380 "$TMP/valkey"
  RATELIMIT_VALKEY_ADDR=127.0.0.1:$PORT
}

# cluster_ready PORT...: true when every node reports cluster_state:ok and
# redis-cli agrees that all slots are covered with one configuration.
cluster_ready() {
  local p
  for p in "$@"; do
    redis-cli -h 127.0.0.1 -p "$p" CLUSTER INFO 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok' || return 1
  done
  redis-cli --cluster check "127.0.0.1:$1" >/dev/null 2>&1
}

start_redis_cluster() {
  ensure_redis
  local i ports=() addrs=() deadline
  for i in 1 2 3; do
    start_redis "cluster-node-$i" redis-server redis-cli 17001 "$TMP/cluster-$i" \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000
    ports+=("$PORT")
    addrs+=("127.0.0.1:$PORT")
  done
  if ! redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes \
    </dev/null >"$TMP/cluster-create.log" 2>&1; then
    show_log "$TMP/cluster-create.log"
    die "redis-cli --cluster create failed"
  fi
  deadline=$((SECONDS + TIMEOUT))
  until cluster_ready "${ports[@]}"; do
    if ((SECONDS >= deadline)); then
      for i in 1 2 3; do show_log "$TMP/cluster-$i/server.log"; done
      redis-cli -h 127.0.0.1 -p "${ports[0]}" CLUSTER INFO >&2 || true
      die "the Redis Cluster did not reach cluster_state:ok within ${TIMEOUT}s"
    fi
    sleep 0.2
  done
  RATELIMIT_REDIS_CLUSTER_ADDRS=$(IFS=,; echo "${addrs[*]}")
  log "redis cluster: $RATELIMIT_REDIS_CLUSTER_ADDRS (cluster_state:ok)"
}

# --------------------------------------------------------------- postgres

# pg_bindir: print the directory of the newest initdb (Debian keeps them in
# /usr/lib/postgresql/VERSION/bin, off PATH).
pg_bindir() {
  local d
  for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v initdb)")"
    return 0
  fi
  return 1
}

# pg_user: the user that runs PostgreSQL. initdb refuses root, so as root use
# the postgres system user, or create a dedicated system user.
pg_user() {
  if [ "$(id -u)" -ne 0 ]; then
    id -un
  elif id postgres >/dev/null 2>&1; then
    echo postgres
  else
    id ratelimit-pg >/dev/null 2>&1 ||
      useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin ratelimit-pg
    echo ratelimit-pg
  fi
}

# as_pg USER CMD...: run CMD as USER from / (so its cwd is readable).
as_pg() {
  local user=$1
  shift
  if [ "$(id -u)" -eq 0 ] && [ "$user" != root ]; then
    (cd / && runuser -u "$user" -- "$@")
  else
    (cd / && "$@")
  fi
}

start_postgres() {
  local bin user dir port="" started=""
  bin=$(pg_bindir) || { apt_install postgresql; bin=$(pg_bindir) || die "initdb not found after installing postgresql"; }
  user=$(pg_user)
  dir=$TMP/postgres
  mkdir -p "$dir"
  chmod 755 "$TMP"
  if [ "$(id -u)" -eq 0 ]; then chown "$user:" "$dir"; fi
  chmod 700 "$dir"
  as_pg "$user" test -w "$dir" || die "$user cannot write $dir (set TMPDIR to a directory it can reach)"

  # Superuser and database are both named ratelimit, trusted on loopback.
  if ! as_pg "$user" "$bin/initdb" -D "$dir/data" -U ratelimit --auth=trust -E UTF8 \
    --locale=C --no-sync >"$dir/initdb.log" 2>&1; then
    show_log "$dir/initdb.log"
    die "initdb failed"
  fi
  cat >>"$dir/data/postgresql.conf" <<EOF
# Throwaway test server: loopback only, no durability.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
EOF
  record "postgres $user $bin $dir/data"

  for _ in 1 2 3 4 5 6 7 8 9 10; do
    port=$(free_port "${port:-15432}")
    if as_pg "$user" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "-p $port" \
      -w -t "$TIMEOUT" start >"$dir/pg_ctl.log" 2>&1; then
      started=1
      break
    fi
    if grep -qiE 'could not bind|already in use' "$dir/server.log" 2>/dev/null; then
      log "postgres: port $port was taken, trying another"
      port=$((port + 1))
      continue
    fi
    show_log "$dir/pg_ctl.log"
    show_log "$dir/server.log"
    die "PostgreSQL did not start on 127.0.0.1:$port within ${TIMEOUT}s"
  done
  [ -n "$started" ] || die "postgres: could not find a free port from 15432"
  USED_PORTS+="$port "
  if ! as_pg "$user" "$bin/createdb" -h 127.0.0.1 -p "$port" -U ratelimit ratelimit 2>"$dir/createdb.log"; then
    show_log "$dir/createdb.log"
    die "createdb ratelimit failed"
  fi
  RATELIMIT_POSTGRES_URL="postgres://ratelimit@127.0.0.1:$port/ratelimit?sslmode=disable"
  log "postgres: 127.0.0.1:$port as $user ($bin)"
}

# --------------------------------------------------------------- dynalite

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

# dynalite_ready PORT: true when ListTables answers with a table list.
dynalite_ready() {
  curl -fsS -m 2 -X POST "http://127.0.0.1:$1/" \
    -H 'Content-Type: application/x-amz-json-1.0' \
    -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
    -H "X-Amz-Date: $(date -u +%Y%m%dT%H%M%SZ)" \
    -H 'Authorization: AWS4-HMAC-SHA256 Credential=test/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date, Signature=0' \
    -d '{}' 2>/dev/null | grep -q '"TableNames"'
}

start_dynalite() {
  ensure_dynalite
  command -v curl >/dev/null 2>&1 || apt_install curl
  local dir=$TMP/dynalite pid deadline port=18000
  mkdir -p "$dir"
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    port=$(free_port "$port")
    # In memory (no --path); tables are ACTIVE at once instead of after 500ms.
    (cd "$dir" && exec node "$ROOT/scripts/dynalite/node_modules/dynalite/cli.js" \
      --host 127.0.0.1 --port "$port" --createTableMs 0 --deleteTableMs 0 --updateTableMs 0 \
      </dev/null >"$dir/server.log" 2>&1) &
    pid=$!
    record "pid $pid dynalite"
    deadline=$((SECONDS + TIMEOUT))
    while alive "$pid" && ((SECONDS < deadline)); do
      # The log line proves that this process, not another, holds the port.
      grep -q 'listening at' "$dir/server.log" && dynalite_ready "$port" && break
      sleep 0.1
    done
    if alive "$pid" && grep -q 'listening at' "$dir/server.log" && dynalite_ready "$port"; then
      USED_PORTS+="$port "
      RATELIMIT_DYNAMODB_ENDPOINT=http://127.0.0.1:$port
      log "dynalite: $RATELIMIT_DYNAMODB_ENDPOINT (pid $pid)"
      return 0
    fi
    kill "$pid" 2>/dev/null || true
    if grep -q EADDRINUSE "$dir/server.log"; then
      log "dynalite: port $port was taken, trying another"
      port=$((port + 1))
      continue
    fi
    show_log "$dir/server.log"
    die "dynalite did not answer on 127.0.0.1:$port within ${TIMEOUT}s"
  done
  die "dynalite: could not find a free port"
}

# ------------------------------------------------------------- start/stop

# stop_all: undo everything recorded in $STATE/started, newest first, then
# remove the temporary directories. Safe to run twice.
stop_all() {
  local kind a b c d pid i
  [ -f "$STATE/started" ] || return 0
  while read -r kind a b c d; do
    case $kind in
      pid)
        pid=$a
        alive "$pid" || continue
        # Only signal a process that is still the one we started.
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qE 'redis|valkey|node' || continue
        kill "$pid" 2>/dev/null || true
        i=0
        while alive "$pid" && ((i++ < 100)); do sleep 0.1; done
        if alive "$pid"; then
          log "$b (pid $pid) ignored SIGTERM; killing it"
          kill -9 "$pid" 2>/dev/null || true
        fi
        ;;
      postgres) # user bindir datadir
        if [ -f "$c/postmaster.pid" ]; then
          as_pg "$a" "$b/pg_ctl" -D "$c" -m immediate -w -t 30 stop >/dev/null 2>&1 || {
            pid=$(head -n 1 "$c/postmaster.pid" 2>/dev/null || true)
            if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi
          }
        fi
        ;;
      tmpdir)
        case $a in */ratelimit-servers.*) rm -rf "$a" ;; esac
        ;;
    esac
  done < <(tac "$STATE/started")
  rm -f "$STATE/started" "$STATE/env"
}

# all_alive: true when every process recorded by an earlier start still runs.
all_alive() {
  local kind a b c rest
  [ -f "$STATE/env" ] && [ -f "$STATE/started" ] || return 1
  while read -r kind a b c rest; do
    case $kind in
      pid) alive "$a" || return 1 ;;
      postgres) [ -f "$c/postmaster.pid" ] || return 1 ;; # user bindir datadir
    esac
  done <"$STATE/started"
}

write_env() {
  local v q
  : >"$STATE/env.tmp"
  for v in RATELIMIT_REDIS_ADDR RATELIMIT_REDIS_CLUSTER_ADDRS RATELIMIT_VALKEY_ADDR \
    RATELIMIT_POSTGRES_URL RATELIMIT_DYNAMODB_ENDPOINT RATELIMIT_CHROMIUM; do
    q=${!v}
    q=${q//\'/\'\\\'\'} # single-quote the value: ' becomes '\''
    printf "export %s='%s'\n" "$v" "$q" >>"$STATE/env.tmp"
  done
  mv "$STATE/env.tmp" "$STATE/env"
}

start() {
  if all_alive; then
    log "servers in $STATE already run; reusing them"
    return 0
  fi
  stop_all # leftovers of an earlier, failed or killed start
  # A failed start stops whatever it had started.
  trap 'rc=$?; [ "$rc" -eq 0 ] || stop_all; exit "$rc"' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  TMP=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-servers.XXXXXX")
  record "tmpdir $TMP"

  : "${RATELIMIT_REDIS_ADDR:=}" "${RATELIMIT_REDIS_CLUSTER_ADDRS:=}" "${RATELIMIT_VALKEY_ADDR:=}"
  : "${RATELIMIT_POSTGRES_URL:=}" "${RATELIMIT_DYNAMODB_ENDPOINT:=}" "${RATELIMIT_CHROMIUM:=}"

  if [ -n "$RATELIMIT_REDIS_ADDR" ]; then
    log "redis: using RATELIMIT_REDIS_ADDR=$RATELIMIT_REDIS_ADDR"
  else
    start_standalone_redis
  fi
  if [ -n "$RATELIMIT_REDIS_CLUSTER_ADDRS" ]; then
    log "redis cluster: using RATELIMIT_REDIS_CLUSTER_ADDRS=$RATELIMIT_REDIS_CLUSTER_ADDRS"
  else
    start_redis_cluster
  fi
  if [ -n "$RATELIMIT_VALKEY_ADDR" ]; then
    log "valkey: using RATELIMIT_VALKEY_ADDR=$RATELIMIT_VALKEY_ADDR"
  elif command -v valkey-server >/dev/null 2>&1; then
    start_valkey
  else
    RATELIMIT_VALKEY_ADDR=$RATELIMIT_REDIS_ADDR
    log "valkey: valkey-server not on PATH; using the Redis server $RATELIMIT_VALKEY_ADDR (wire-compatible)"
  fi
  if [ -n "$RATELIMIT_POSTGRES_URL" ]; then
    log "postgres: using RATELIMIT_POSTGRES_URL"
  else
    start_postgres
  fi
  if [ -n "$RATELIMIT_DYNAMODB_ENDPOINT" ]; then
    log "dynalite: using RATELIMIT_DYNAMODB_ENDPOINT=$RATELIMIT_DYNAMODB_ENDPOINT"
  else
    start_dynalite
  fi
  ensure_browser

  write_env
  log "ready; environment in $STATE/env"
}

[ $# -eq 2 ] || usage
STATE=$2
mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd)

case $1 in
  start) start ;;
  stop) stop_all ;;
  *) usage ;;
esac
