#!/usr/bin/env bash
# Measure how long `ratelimit serve` takes to answer while its Redis hangs:
# the figure of docs/failures.md's "A store that hangs".
#
#   scripts/hung-store.sh [CLIENTS]    CLIENTS concurrent HTTP clients
#                                      (default 40), spread over the six
#                                      algorithm endpoints
#
# It builds the command, starts a redis-server of its own on a free
# loopback port (redis-server on PATH; make test installs it) and `ratelimit
# serve` on it, answers one request per endpoint with the store up, then
# freezes the Redis process (SIGSTOP) and fires the clients at once. It
# prints each status with its time, the slowest answer, and the load
# (uptime). It stops only what it started.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
clients=${1:-40}
dir=$(mktemp -d)
redis_pid= serve_pid=
cleanup() {
  [ -n "$redis_pid" ] && { kill -CONT "$redis_pid" 2>/dev/null || true; kill "$redis_pid" 2>/dev/null || true; }
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # wait_for WHAT COMMAND...: retry COMMAND for up to 10s
  local what=$1; shift
  for _ in $(seq 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "$what did not come up" >&2; exit 1
}

go build -o "$dir/ratelimit" ./cmd/ratelimit
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
redis_pid=$!
wait_for redis-server redis-cli -p "$rport" ping
hport=$(free_port)
"$dir/ratelimit" serve -addr "127.0.0.1:$hport" -store "redis://127.0.0.1:$rport" >"$dir/serve.log" 2>&1 &
serve_pid=$!
wait_for "ratelimit serve" curl -sf "http://127.0.0.1:$hport/"

paths=(/fixed-window /sliding-window-log /sliding-window-counter /token-bucket /gcra /leaky-bucket)
for p in "${paths[@]}"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hport$p")
  [ "$code" = 200 ] || { echo "GET $p with the store up: $code, want 200" >&2; exit 1; }
done

echo "load before: $(uptime)"
kill -STOP "$redis_pid"
mkdir "$dir/out"
for i in $(seq 0 $((clients - 1))); do
  p=${paths[$((i % ${#paths[@]}))]}
  curl -s -o /dev/null -m 120 -D "$dir/out/h$i" -w "%{http_code} %{time_total} $p\n" "http://127.0.0.1:$hport$p" >"$dir/out/r$i" &
done
wait $(jobs -p | grep -v -e "^$redis_pid\$" -e "^$serve_pid\$") 2>/dev/null || true
echo "load after: $(uptime)"
kill -CONT "$redis_pid"

cat "$dir"/out/r* | sort -k2 -g
no_retry=$(for i in $(seq 0 $((clients - 1))); do grep -qi '^retry-after:' "$dir/out/h$i" || echo "$i"; done | wc -l)
awk -v n="$clients" -v nr="$no_retry" '
  { codes[$1]++; if ($2 > max) max = $2 }
  END {
    printf "%d clients on 6 endpoints, Redis frozen: slowest answer %.3fs;", n, max
    for (c in codes) printf " %d× %s", codes[c], c
    printf "; %d without Retry-After\n", nr
  }' "$dir"/out/r*
