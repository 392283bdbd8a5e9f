#!/usr/bin/env bash
# The project's own Docker daemon (Debian's docker.io), for kind and for the benchmark's
# `docker run --runtime runsc` baseline: the one way this project starts dockerd.
#
#   cluster/docker.sh install   apt-get install docker.io (once)
#   cluster/docker.sh start     start it (idempotent); prints the export line for DOCKER_HOST
#   cluster/docker.sh stop      stop the daemon this script started (by its pid file)
#   cluster/docker.sh env       print the export line for DOCKER_HOST
#
# It has its own data root, exec root and socket, so it never meets another Docker on the
# host. It installs no iptables rules, does not turn on IP forwarding or masquerading and
# has no default bridge: the embedded cluster's kube-proxy and kube-router chains, its
# CNI bridge and its FORWARD policy stay as they are. kind's own network (a user-defined
# bridge) still works: its nodes share one L2 segment, and the API server's published
# port goes through docker-proxy on 127.0.0.1. Its runsc runtime is the node's gVisor
# build, always with networking off, on systrap like the cluster's handler.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
CACHE=${OPENBLOX_CACHE:-/var/cache/openblox}
ROOT=${OPENBLOX_ROOT:-/var/lib/openblox}
STATE=$ROOT/docker
RUN=/run/openblox/docker
SOCKET=$RUN/docker.sock
PIDFILE=$RUN/dockerd.pid
LOG=$STATE/dockerd.log
# Debian's CLI speaks the daemon's API; a newer `docker` first on PATH may not.
DOCKER=/usr/bin/docker

log() { printf '[docker] %s\n' "$*" >&2; }
die() { printf '[docker] error: %s\n' "$*" >&2; exit 1; }

answers() { [[ -S $SOCKET ]] && "$DOCKER" -H "unix://$SOCKET" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

cmd_env() { echo "export DOCKER_HOST=unix://$SOCKET"; }

cmd_install() {
  [[ -x /usr/sbin/dockerd && -x $DOCKER ]] && return
  [[ $(id -u) == 0 ]] || die "run as root"
  log "installing Debian's docker.io"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null
}

write_config() {
  local runsc=$CACHE/gvisor-$GVISOR_VERSION/runsc wrapper=$STATE/runsc-docker
  mkdir -p "$STATE" "$RUN"
  # `start` output goes through a file: runsc leaves a gofer holding the shim's pipe open.
  cat >"$wrapper.partial" <<EOF
#!/bin/sh
# runsc for the project's dockerd: networking off, systrap (as the cluster's handler).
set -- --network=none --platform=systrap "\$@"
case " \$* " in
  *" start "*)
    out=\$(mktemp -p $RUN runsc-start.XXXXXX)
    $runsc "\$@" >"\$out" 2>&1
    status=\$?
    cat "\$out"
    rm -f "\$out"
    exit \$status ;;
esac
exec $runsc "\$@"
EOF
  chmod 0755 "$wrapper.partial"
  mv "$wrapper.partial" "$wrapper"
  cat >"$STATE/daemon.json" <<EOF
{
 "runtimes": {"runsc": {"path": "$wrapper"},
              "runsc-oci-seccomp": {"path": "$wrapper", "runtimeArgs": ["--oci-seccomp"]}},
 "iptables": false,
 "ip6tables": false,
 "ip-forward": false,
 "ip-masq": false,
 "bridge": "none",
 "data-root": "$STATE/data",
 "exec-root": "$RUN/exec",
 "pidfile": "$PIDFILE",
 "hosts": ["unix://$SOCKET"],
 "storage-driver": "overlay2"
}
EOF
}

cmd_start() {
  if answers; then cmd_env; return; fi
  [[ -x /usr/sbin/dockerd && -x $DOCKER ]] ||
    die "Docker is not installed: run $0 install (Debian's docker.io)"
  [[ $(id -u) == 0 ]] || die "run as root"
  write_config
  log "starting dockerd ($SOCKET)"
  rm -f "$PIDFILE"
  (
    # The daemon keeps no descriptor of its caller's: one that held a `flock` would keep
    # that lock taken for as long as dockerd lives (as cluster.sh's start does).
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    # Debian's dockerd runs Debian's containerd (1.6), which finds its runc shim on PATH:
    # the node's own (containerd 2's, in /var/lib/openblox/bin) speaks a newer shim API.
    export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    exec setsid /usr/sbin/dockerd --config-file "$STATE/daemon.json" >>"$LOG" 2>&1 </dev/null
  ) &
  for _ in $(seq 120); do
    answers && { cmd_env; return; }
    kill -0 $! 2>/dev/null || break
    sleep 0.5
  done
  tail -n 20 "$LOG" >&2
  die "dockerd did not start; see $LOG"
}

cmd_stop() {
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null) || { log "not running"; return; }
  if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q dockerd; then
    log "stopping dockerd ($pid)"
    kill -TERM "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
}

case ${1:-} in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  env) cmd_env ;;
  *) echo "usage: $0 install|start|stop|env" >&2; exit 2 ;;
esac
