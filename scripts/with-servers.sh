#!/usr/bin/env bash
# Run a command with the test servers up, then stop them.
#
#   scripts/with-servers.sh COMMAND [ARGS...]
#
# Starts the servers (scripts/servers.sh installs them, internal/testserver
# starts them) in a fresh state directory, exports their RATELIMIT_*
# variables, runs COMMAND from the repository root, stops every server it
# started on exit (also on failure or interrupt), and exits with COMMAND's
# status. Variables already set name servers that run and are
# left alone. Example: scripts/with-servers.sh env | grep RATELIMIT
set -euo pipefail

if [ $# -eq 0 ]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-state.XXXXXX")

CHILD=""

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local rc=$? stop_rc=0
  if [ -n "$CHILD" ] && kill -0 "$CHILD" 2>/dev/null; then
    kill -TERM "$CHILD" 2>/dev/null || true
    wait "$CHILD" 2>/dev/null || true
  fi
  bash "$ROOT/scripts/servers.sh" stop "$STATE" || stop_rc=$?
  rm -rf "$STATE"
  if [ "$stop_rc" -ne 0 ]; then
    echo "with-servers.sh: stopping the servers failed (state was $STATE)" >&2
    [ "$rc" -ne 0 ] || rc=$stop_rc
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bash "$ROOT/scripts/servers.sh" start "$STATE"
# shellcheck source=/dev/null
source "$STATE/env"

cd "$ROOT"
# Run COMMAND in the background and wait for it, so that a signal reaches the
# traps above at once (cleanup passes it on as SIGTERM) instead of after
# COMMAND ends. stdin is passed explicitly (a background job would get
# /dev/null), unless it is closed.
if [ -e /proc/self/fd/0 ]; then exec 3<&0; else exec 3</dev/null; fi
"$@" <&3 3<&- &
CHILD=$!
rc=0
wait "$CHILD" || rc=$?
CHILD=""
exit "$rc"
