#!/usr/bin/env bash
# The kind part's own builds (kind, kubeadm, CoreDNS, the node images, Debian's docker.io
# and the project's dockerd), run in the background while `make test` runs the embedded
# suite, so a new machine's `.ci/run` does not wait for them afterwards (docs/kind.md,
# "make test and the 70-minute budget"). They run at the lowest CPU and I/O priority: the
# embedded suite's timed tests (the failover bound, RES-004) keep the cores whenever they
# want them, and the build takes only what the suite leaves idle.
#
#   cluster/kind/prebuild.sh start   start `kind.sh build` in the background (its own session)
#   cluster/kind/prebuild.sh wait    wait for it; on failure print why and its last log lines
#   cluster/kind/prebuild.sh stop    stop it (when the embedded suite failed)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=${OPENBLOX_ROOT:-/var/lib/openblox}
STATE=$ROOT/kind
LOG=$STATE/prebuild.log
PIDFILE=$STATE/prebuild.pid
RCFILE=$STATE/prebuild.rc

log() { printf '[kind prebuild] %s\n' "$*" >&2; }

running() { [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

cmd_start() {
  mkdir -p "$STATE"
  if running; then log "already running (pid $(cat "$PIDFILE"))"; return; fi
  rm -f "$RCFILE"
  log "building the kind node images in the background (log: $LOG)"
  # setsid: its own process group, so `stop` ends every child and make's shell can exit.
  setsid bash -c '
    rc=0
    nice -n 19 ionice -c 3 "$1" build >"$2" 2>&1 || rc=$?
    echo "$rc" >"$3.partial" && mv "$3.partial" "$3"
  ' prebuild "$here/kind.sh" "$LOG" "$RCFILE" </dev/null >/dev/null 2>&1 &
  echo $! >"$PIDFILE"
}

cmd_wait() {
  [[ -f $PIDFILE ]] || { log "not started: run '$0 start' first"; exit 1; }
  local waited=$SECONDS
  while [[ ! -f $RCFILE ]]; do
    if ! running; then
      log "the background build ended without an exit status; its log ends:"
      tail -n 30 "$LOG" >&2 || true
      exit 1
    fi
    sleep 2
  done
  local rc
  rc=$(cat "$RCFILE")
  rm -f "$PIDFILE"
  if [[ $rc != 0 ]]; then
    log "the background build failed (exit $rc); the last lines of $LOG:"
    tail -n 30 "$LOG" >&2 || true
    exit "$rc"
  fi
  log "built (waited $((SECONDS - waited)) s after the embedded suite)"
}

cmd_stop() {
  if running; then
    kill -TERM -- "-$(cat "$PIDFILE")" 2>/dev/null || true
    log "stopped"
  fi
  rm -f "$PIDFILE"
}

case ${1:-} in
  start) cmd_start ;;
  wait) cmd_wait ;;
  stop) cmd_stop ;;
  *) echo "usage: $0 start|wait|stop" >&2; exit 2 ;;
esac
