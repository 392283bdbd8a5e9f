#!/usr/bin/env bash
# The embedded single-node cluster: upstream Kubernetes built from source, containerd,
# runc and gVisor, bridge CNI, kube-proxy and kube-router's NetworkPolicy firewall.
#
#   cluster/cluster.sh install   install Debian packages and build every binary (cached)
#   cluster/cluster.sh up        start the cluster (idempotent; recovers after a crash)
#   cluster/cluster.sh down      stop what `up` started; keeps the cluster's state and caches
#   cluster/cluster.sh reset     stop it and delete its state: every object it held (`make clean`)
#   cluster/cluster.sh status    say what runs
#   cluster/cluster.sh env       print the export line for KUBECONFIG
#   cluster/cluster.sh images    build (cached) and import the images into the running node
#
# The cluster keeps its state: every object lives in etcd's data directory, which only
# `reset` deletes. `up` after `down`, a reboot or a crash starts etcd on the same data;
# what a crash leaves on the node (processes, mounts, runtime state, address leases) is
# cleaned first, and etcd's data is never touched by that.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

CACHE=${OPENBLOX_CACHE:-/var/cache/openblox}
ROOT=${OPENBLOX_ROOT:-/var/lib/openblox}
STATE=$ROOT/cluster
ETCD_DATA=$STATE/etcd
RUN=${OPENBLOX_RUN:-/run/openblox}
# Where containerd-shim-runsc-v1 looks for its own config (a path gVisor fixes).
RUNSC_SHIM_CONFIG_DIR=/run/containerd/runsc
BIN=$ROOT/bin
CONTAINERD_SOCK=$RUN/containerd/containerd.sock
KUBELET_ROOT=$ROOT/kubelet
KUBECONFIG_ADMIN=$STATE/admin.kubeconfig
export PATH=$BIN:$PATH
PYTHON=${PYTHON:-python3}
ETCD_CLIENT_PORT=${OPENBLOX_ETCD_CLIENT_PORT:-2379}
ETCD_PEER_PORT=${OPENBLOX_ETCD_PEER_PORT:-2380}
ETCD_METRICS_PORT=${OPENBLOX_ETCD_METRICS_PORT:-2381}
NODE_NAME=$(hostname | tr '[:upper:]' '[:lower:]')
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
CLUSTER_CIDR=10.244.0.0/16
POD_SUBNET=10.244.0.0/22
# The label that marks a node for gVisor (the node agent runs there, manifests/
# node-agent.yaml): this node has it.
GVISOR_NODE_LABEL=openblox.sh/gvisor
# Where the node agent finds what it checks and installs: the places a stock node has them
# (manifests/node-agent.yaml), so the embedded node takes the same manifests.
NRI_SOCKET=/var/run/nri/nri.sock
RUNSC_CONFIG=/etc/containerd/runsc.toml
SECCOMP_DIR=/var/lib/kubelet/seccomp
# The project's registry (CNCF distribution), on loopback only: containerd pulls every
# openblox.local image from it (docs/adr/0021).
REGISTRY_ADDRESS=${OPENBLOX_REGISTRY_ADDRESS:-127.0.0.1:5001}
# Start order; `down` stops in reverse.
COMPONENTS=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kube-router registry)

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }

default_ip() { ip -4 route show default | sed -n 's/.* dev \([^ ]*\).*/\1/p' | head -1 |
  xargs -r -I{} ip -4 -o addr show dev {} | awk '{print $4}' | cut -d/ -f1 | head -1; }

# ---------------------------------------------------------------- prerequisites

# Each line: a command `up` needs, and the Debian package that provides it.
PREREQS="runc:runc iptables:iptables ipset:ipset
conntrack:conntrack ip:iproute2 debootstrap:debootstrap mount:mount nsenter:util-linux
socat:socat curl:curl mkfs.erofs:erofs-utils"

missing_prereqs() {
  local missing=() entry
  for entry in $PREREQS; do
    command -v "${entry%%:*}" >/dev/null 2>&1 || missing+=("${entry%%:*} (package ${entry#*:})")
  done
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] ||
    missing+=("CNI plugins (package containernetworking-plugins)")
  "$PYTHON" -c 'import cryptography' 2>/dev/null ||
    missing+=("Python package cryptography for $PYTHON (pip install cryptography)")
  printf '%s\n' "${missing[@]}"
}

check_prereqs() {
  [[ $(id -u) == 0 ]] || die "run as root: the node runs containerd, kubelet and iptables"
  local missing; missing=$(missing_prereqs)
  if [[ -n $missing ]]; then
    printf '[cluster] error: missing prerequisites:\n' >&2
    sed 's/^/  - /' <<<"$missing" >&2
    printf '[cluster] install them with: %s install   (or: apt-get install %s)\n' "$0" \
      "$DEBIAN_PACKAGES" >&2
    exit 1
  fi
  local built
  for built in "$CACHE/kubernetes-$KUBERNETES_VERSION/kubelet" "$CACHE/etcd-$ETCD_VERSION/server" \
    "$CACHE/kube-router-$KUBE_ROUTER_VERSION/kube-router" "$CACHE/crictl-$CRI_TOOLS_VERSION/crictl" \
    "$CACHE/containerd-$CONTAINERD_VERSION/containerd" \
    "$CACHE/gvisor-$GVISOR_VERSION/runsc" "$CACHE/gvisor-$GVISOR_VERSION/containerd-shim-runsc-v1"; do
    [[ -x $built ]] || die "not built yet: $built; run: $0 install"
  done
}

cmd_install() {
  [[ $(id -u) == 0 ]] || die "run as root"
  command -v go >/dev/null || die "Go 1.26.6 or newer is needed to build Kubernetes and containerd from source (https://go.dev/doc/install)"
  local need=() pkg
  for pkg in $DEBIAN_PACKAGES; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || need+=("$pkg")
  done
  if ((${#need[@]})); then
    log "installing Debian packages: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
  fi
  "$here/build.sh" all
}

# ---------------------------------------------------------------- processes

pidfile() { echo "$STATE/run/$1.pid"; }

running() {
  local pid; pid=$(cat "$(pidfile "$1")" 2>/dev/null) || return 1
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$1"
}

# start NAME ARGV... : run a daemon detached, logs and pid under $STATE.
start() {
  local name=$1; shift
  if running "$name"; then return; fi
  log "starting $name"
  (
    # A daemon keeps no descriptor of its caller's: one that held a `flock` would keep
    # that lock taken for as long as the daemon lives.
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid "$@" >>"$STATE/logs/$name.log" 2>&1 </dev/null
  ) &
  echo $! >"$(pidfile "$name")"
}

stop() {
  local name=$1 pid
  pid=$(cat "$(pidfile "$name")" 2>/dev/null) || return 0
  if running "$name"; then
    log "stopping $name"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$(pidfile "$name")"
}

wait_for() {
  local what=$1 seconds=$2; shift 2
  for _ in $(seq $((seconds * 4))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  die "$what did not come up within ${seconds}s; see $STATE/logs/"
}

kubectl_admin() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

# ---------------------------------------------------------------- configuration

link_binaries() {
  mkdir -p "$BIN"
  local k=$CACHE/kubernetes-$KUBERNETES_VERSION b
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    ln -sfn "$k/$b" "$BIN/$b"
  done
  ln -sfn "$CACHE/etcd-$ETCD_VERSION/server" "$BIN/etcd"
  for b in containerd containerd-shim-runc-v2 ctr; do
    ln -sfn "$CACHE/containerd-$CONTAINERD_VERSION/$b" "$BIN/$b"
  done
  ln -sfn "$CACHE/kube-router-$KUBE_ROUTER_VERSION/kube-router" "$BIN/kube-router"
  ln -sfn "$CACHE/crictl-$CRI_TOOLS_VERSION/crictl" "$BIN/crictl"
  ln -sfn "$CACHE/distribution-$DISTRIBUTION_VERSION/registry" "$BIN/registry"
  # gVisor built from the Go module proxy (runsc, systrap platform, and its containerd
  # shim). Debian's 2022 runsc has no shim and, run through the runc shim, containers
  # cannot be stopped; see docs/runtimes.md.
  # No NRI plugin is started by containerd any more: openblox's node agent connects its
  # own (docs/adr/0020); a link left from before would start a second one.
  mkdir -p "$STATE/nri/plugins" "$STATE/nri/conf.d"
  rm -f "$STATE/nri/plugins/10-openblox"
  local gvisor=$CACHE/gvisor-$GVISOR_VERSION
  ln -sfn "$gvisor/runsc" "$BIN/runsc"
  ln -sfn "$gvisor/containerd-shim-runsc-v1" "$BIN/containerd-shim-runsc-v1"
}


# The running components whose binary is no longer the one `link_binaries` points at.
rebuilt_components() {
  local name pid binary changed=()
  for name in "${COMPONENTS[@]}"; do
    pid=$(cat "$(pidfile "$name")" 2>/dev/null) || continue
    binary=$(readlink -f "$BIN/$name")
    [[ -e /proc/$pid/exe && $(readlink -f "/proc/$pid/exe") != "$binary" ]] && changed+=("$name")
  done
  echo "${changed[*]}"
}

# Rewriting an unchanged file would make a running containerd reload its CNI config.
# What containerd read at start: its configuration.
node_config_digest() {
  sha256sum <"$STATE/config/containerd.toml" | cut -d' ' -f1
}

start_registry() {
  start registry "$BIN/registry" serve "$STATE/config/registry.yml"
  wait_for registry 30 curl -fsS "http://$REGISTRY_ADDRESS/v2/"
}

start_containerd() {
  # A containerd left running reads a changed configuration only when it starts again.
  if running containerd && [[ $(node_config_digest) != "$(cat "$STATE/run/containerd.config" 2>/dev/null)" ]]; then
    log "containerd's configuration changed: restarting containerd"
    stop containerd
  fi
  # containerd finds runtime shims on its PATH.
  start containerd env PATH="$BIN:$PATH" "$BIN/containerd" --config "$STATE/config/containerd.toml"
  wait_for containerd 30 "$BIN/crictl" --runtime-endpoint "unix://$CONTAINERD_SOCK" info
  check_containerd
  node_config_digest >"$STATE/run/containerd.config"
}

# What containerd made of its configuration, not what the file says: it ignores keys it
# does not know, and a containerd 1.x left running on the socket reads none of it.
check_containerd() {
  local crictl=("$BIN/crictl" --runtime-endpoint "unix://$CONTAINERD_SOCK")
  local version; version=$("${crictl[@]}" version 2>/dev/null | sed -n 's/^RuntimeVersion:[[:space:]]*//p')
  [[ $version == v2.* ]] ||
    die "containerd on $CONTAINERD_SOCK is ${version:-of no known version}; this node needs containerd 2 (cluster/versions.env)"
  "${crictl[@]}" info -o json 2>/dev/null | "$PYTHON" "$here/containerd_handlers.py" runsc "$STATE/config/containerd.toml" ||
    die "containerd's configuration did not take"
}

# Off on the kubelet and the scheduler, whatever the release's default (docs/adr/0016).
FEATURE_GATES=InPlacePodLevelResourcesVerticalScaling=false

gate_yaml() {
  local gate gates out=()
  IFS=, read -r -a gates <<<"$FEATURE_GATES"
  for gate in "${gates[@]}"; do out+=("${gate%%=*}: ${gate#*=}"); done
  local IFS=,
  echo "${out[*]}"
}

# What the kubelet and the scheduler read only at start, besides their binaries.
settings_digest() {
  { cat "$STATE/config/kubelet.yaml"; echo "$FEATURE_GATES"; } | sha256sum | cut -d' ' -f1
}

write_if_changed() {
  local content; content=$(cat)
  [[ -f $1 && $(cat "$1") == "$content" ]] || printf '%s\n' "$content" >"$1"
}

write_configs() {
  local ip=$1 conf=$STATE/config
  mkdir -p "$conf/cni" "$STATE/logs" "$STATE/run" "$RUN/runsc"
  : >"$STATE/resolv.conf"
  # containerd 2's configuration, version 3 (docs/adr/0016). Unknown keys are only
  # warned about, so start_containerd checks what containerd made of it.
  write_if_changed "$conf/containerd.toml" <<EOF
version = 3
root = "$ROOT/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  # Where a registry's hosts.toml says how to reach it: openblox.local is the project's
  # registry on loopback, so no name is ever looked up off this machine.
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$conf/certs.d"
  # Pinned: never garbage-collected, and the pod sandbox image of every pod.
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "openblox.local/pause:3.10"
[plugins.'io.containerd.cri.v1.runtime']
  # Root here lacks CAP_SYS_RESOURCE, so a negative oom_score_adj cannot be set:
  # clamp every container's to containerd's own instead of failing to start it.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
    # The runsc handler as gVisor documents it for containerd 2: its shim, whose runsc
    # always runs with networking off. A pod may pass runsc's oci-seccomp switch, which
    # can only turn enforcement of the pod's seccomp profile on (docs/adr/0007).
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"
      pod_annotations = ["dev.gvisor.flag.oci-seccomp"]
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "$RUNSC_CONFIG"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$conf/cni"
# NRI as containerd 2 has it by default: plugins connect to its socket, root only. The
# one openblox needs (noexec scratch, a sized /dev/shm, the process cap) is its node
# agent's, which connects from a DaemonSet pod (node-agent/, docs/adr/0020). The default
# validator refuses a container whose pod names a plugin it requires that did not take
# part: sandbox pods require openblox's, so while the agent is not connected a sandbox
# container fails instead of starting bare.
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  disable_connections = false
  plugin_path = "$STATE/nri/plugins"
  plugin_config_path = "$STATE/nri/conf.d"
  socket_path = "$NRI_SOCKET"
  [plugins.'io.containerd.nri.v1.nri'.default_validator]
    enable = true
EOF
  mkdir -p "$conf/certs.d/openblox.local" "$ROOT/registry"
  write_if_changed "$conf/certs.d/openblox.local/hosts.toml" <<EOF
# openblox.local is the project's registry (cluster/cluster.sh, docs/adr/0021); nothing else.
server = "http://$REGISTRY_ADDRESS"
[host."http://$REGISTRY_ADDRESS"]
  capabilities = ["pull", "resolve"]
EOF
  write_if_changed "$conf/registry.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $ROOT/registry
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDRESS
EOF
  # openblox's seccomp profile, which sandbox pods name as Localhost openblox/sandbox.json,
  # is the node agent's to install, where a kubelet keeps them by default: this kubelet's
  # seccomp directory is that one.
  mkdir -p "$(dirname "$SECCOMP_DIR")" "$KUBELET_ROOT"
  if [[ ! -L $KUBELET_ROOT/seccomp ]]; then
    mkdir -p "$SECCOMP_DIR"
    rm -rf "$KUBELET_ROOT/seccomp"
    ln -sfn "$SECCOMP_DIR" "$KUBELET_ROOT/seccomp"
  fi
  # gVisor's shim reads its own settings (not containerd's ConfigPath) from this fixed
  # path when it starts. Grouping runs one shim per pod instead of one per container (the
  # pause container and the sandbox's), which is about 6 MiB of host memory per Sandbox
  # (docs/benchmarks, density); nothing else in the file changes how a pod runs.
  mkdir -p "$RUNSC_SHIM_CONFIG_DIR"
  write_if_changed "$RUNSC_SHIM_CONFIG_DIR/config.toml" <"$repo/cluster/runsc-shim.toml"
  mkdir -p "$(dirname "$RUNSC_CONFIG")"
  write_if_changed "$RUNSC_CONFIG" <<EOF
binary_name = "$BIN/runsc"
root = "$RUN/runsc"
[runsc_config]
  network = "none"
  platform = "systrap"
  # oci-seccomp is not set for every pod: with it, a pod's RuntimeDefault profile would
  # be applied inside the Sentry, where runsc answers clone3 with EPERM instead of the
  # profile's ENOSYS, so glibc cannot fall back to clone and no thread starts. Sandbox
  # pods turn it on themselves, with a profile shaped for runsc (docs/adr/0007).
  ${OPENBLOX_RUNSC_DEBUG:+debug = "true"}
  ${OPENBLOX_RUNSC_DEBUG:+debug-log = "$STATE/logs/runsc/"}
EOF
  write_if_changed "$conf/cni/10-openblox.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "openblox",
  "plugins": [
    {
      "type": "bridge", "bridge": "openblox0", "isGateway": true, "ipMasq": false,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "dataDir": "$ROOT/cni-ipam",
               "ranges": [[{"subnet": "$POD_SUBNET"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  write_if_changed "$conf/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: Webhook}
# The cgroup driver comes from containerd (its runc handler: cgroupfs). This VM is cgroup
# v1 (hybrid), which the kubelet refuses since 1.35 unless told.
failCgroupV1: false
# Kubernetes 1.36 and 1.37 charge a RuntimeClass's overhead twice once this gate's pod
# status is written (kubernetes/kubernetes#139627): a gVisor pod would hold its 5m twice.
featureGates: {$(gate_yaml)}
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
clusterDomain: cluster.local
resolvConf: $STATE/resolv.conf
tlsCertFile: $STATE/pki/kubelet-serving.crt
tlsPrivateKeyFile: $STATE/pki/kubelet-serving.key
failSwapOn: false
maxPods: 300
podPidsLimit: 1024
serializeImagePulls: false
# Images are imported, never pulled: garbage-collecting one would strand its pods.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "256Mi", nodefs.available: "2%", imagefs.available: "2%"}
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
EOF
  write_if_changed "$conf/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $CLUSTER_CIDR
hostnameOverride: $NODE_NAME
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

# ---------------------------------------------------------------- crash recovery

# Whatever a previous run left on the node when it was killed without `down` (a crash, a
# reboot, a killed CI job): stale pid files, daemons, shims and sandboxes, mounts under
# our directories, the runtime's state of containers that no longer run, and the CNI
# address leases of their pods. Every sandbox on the node is gone after this, as after
# a reboot; the kubelet starts their pods again from the API. etcd's data, containerd's
# images and the kubelet's own files are the cluster's state and are kept.
clean_node() {
  local name
  for name in "${COMPONENTS[@]}"; do running "$name" || rm -f "$(pidfile "$name")"; done
  pkill -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" 2>/dev/null || true
  pkill -f "containerd-shim-runsc-v1 .*-address $CONTAINERD_SOCK" 2>/dev/null || true
  pkill -f "$BIN/runsc" 2>/dev/null || true
  pkill -f "runsc-sandbox .*--root=$RUN/runsc" 2>/dev/null || true
  local mounts
  # Not the project's dockerd's (cluster/docker.sh: its data root under $ROOT/docker, its
  # exec root under $RUN/docker): it runs beside the cluster, building kind's images or
  # running kind's nodes, and a cold `make test` starts it before the cluster is up.
  mounts=$(awk '{print $2}' /proc/mounts | grep -E "^($ROOT|$RUN)/" |
    grep -Ev "^($ROOT|$RUN)/docker(/|$)" | sort -r || true)
  if [[ -n $mounts ]]; then
    log "unmounting $(wc -l <<<"$mounts") leftover mounts"
    while read -r m; do umount -l "$m" 2>/dev/null || true; done <<<"$mounts"
  fi
  # The runtime's state of tasks that died with their shims (a half-written bundle
  # among them), and the leases of pod addresses no pod holds any more. Pod
  # directories go too: their memory-backed volumes died with the pods.
  rm -rf "$ROOT/cni-ipam" "$RUN/containerd" "$RUN/runsc" "$KUBELET_ROOT/pods"
}

# ---------------------------------------------------------------- etcd's data

# etcd opens data written by its own minor version or the one before, never a newer
# one's (https://etcd.io/docs/v3.6/upgrades/). The version that last ran on the data is
# kept beside it.
ETCD_STAMP=$STATE/etcd.version

minor_of() { sed -n 's/^v\{0,1\}\([0-9]*\)\.\([0-9]*\).*/\1 \2/p' <<<"$1"; }

fresh_start_hint() {
  printf '[cluster]   nothing was deleted: the data is kept in %s\n' "$ETCD_DATA" >&2
  printf '[cluster]   to start fresh instead, deleting every object this cluster held: make clean\n' >&2
}

# Refuse, before anything starts, data another etcd version wrote that this one cannot
# open. Data of no known version (none yet, or from before the stamp) is left to etcd.
check_etcd_data() {
  [[ -d $ETCD_DATA/member ]] || return 0
  local wrote; wrote=$(cat "$ETCD_STAMP" 2>/dev/null) || return 0
  local have want have_major have_minor want_major want_minor
  read -r have_major have_minor <<<"$(minor_of "$wrote")"
  read -r want_major want_minor <<<"$(minor_of "$ETCD_VERSION")"
  if [[ -z $have_major || -z $want_major ]]; then
    printf '[cluster] error: %s names no etcd version ("%s")\n' "$ETCD_STAMP" "$wrote" >&2
    fresh_start_hint; exit 1
  fi
  have=$((have_major * 1000 + have_minor)) want=$((want_major * 1000 + want_minor))
  if ((have > want || want - have > 1)); then
    printf '[cluster] error: the data in %s was written by etcd %s, which etcd %s cannot open\n' \
      "$ETCD_DATA" "$wrote" "$ETCD_VERSION" >&2
    printf '[cluster]   (etcd moves one minor version up at a time and never down)\n' >&2
    fresh_start_hint; exit 1
  fi
}

etcd_healthy() {
  curl -fs --max-time 2 --cacert "$STATE/pki/ca.crt" --cert "$STATE/pki/etcd-client.crt" \
    --key "$STATE/pki/etcd-client.key" "https://127.0.0.1:$ETCD_CLIENT_PORT/health" |
    grep -q '"health":"true"'
}

# Start etcd on its data and wait for it; if it cannot open the data (damaged, or a
# version the stamp did not know), say what it said and stop, deleting nothing.
# What etcd logged as an error since byte $1 of its log (its JSON lines' messages), or
# else its last lines: the reason it gave, not its stack.
etcd_last_words() {
  "$PYTHON" - "$STATE/logs/etcd.log" "$1" <<'PY'
import json, sys
with open(sys.argv[1], "rb") as log:
    log.seek(int(sys.argv[2]))
    lines = log.read().decode("utf-8", "replace").splitlines()
said = []
for line in lines:
    try:
        entry = json.loads(line)
    except ValueError:
        continue
    if isinstance(entry, dict) and entry.get("level") in ("error", "panic", "fatal"):
        said.append(" ".join(str(entry[k]) for k in ("msg", "error", "path") if k in entry))
for text in (said or lines)[-4:]:
    print(text[:300])
PY
}

start_etcd() {
  check_etcd_data
  local pki=$STATE/pki since
  since=$(stat -c %s "$STATE/logs/etcd.log" 2>/dev/null || echo 0)
  start etcd "$BIN/etcd" --name openblox --data-dir "$ETCD_DATA" \
    --listen-client-urls "https://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls "https://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "openblox=http://127.0.0.1:$ETCD_PEER_PORT" \
    --cert-file "$pki/etcd-server.crt" --key-file "$pki/etcd-server.key" \
    --client-cert-auth --trusted-ca-file "$pki/ca.crt" \
    --listen-metrics-urls "http://127.0.0.1:$ETCD_METRICS_PORT" --log-level warn \
    --quota-backend-bytes 4294967296
  local _
  for _ in $(seq 120); do
    if etcd_healthy; then
      echo "$ETCD_VERSION" >"$ETCD_STAMP"
      return 0
    fi
    running etcd || break
    sleep 0.25
  done
  stop etcd
  printf '[cluster] error: etcd could not start on the data in %s; its last words:\n' "$ETCD_DATA" >&2
  etcd_last_words "$since" | sed 's/^/[cluster]   | /' >&2
  fresh_start_hint
  exit 1
}

# ---------------------------------------------------------------- bootstrap

bootstrap_objects() {
  kubectl_admin apply --server-side --force-conflicts -k "$repo/runtimeclasses" >/dev/null
  kubectl_admin apply --server-side --force-conflicts -f - >/dev/null <<'EOF'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "openblox:kube-router"}
rules:
- apiGroups: [""]
  resources: [namespaces, pods, services, nodes, endpoints]
  verbs: [get, list, watch]
- apiGroups: ["networking.k8s.io"]
  resources: [networkpolicies]
  verbs: [get, list, watch]
- apiGroups: ["discovery.k8s.io"]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [nodes]
  verbs: [patch, update]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "openblox:kube-router"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "openblox:kube-router"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "openblox:kube-router"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "openblox:kube-proxy"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node-proxier"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:kube-proxy"}
EOF
}

# Images are built here and imported: this node needs no registry. The install names them
# by digest (docs/adr/0021); the build also tags them by content.
import_images() {
  PYTHON=$PYTHON "$here/images/build.sh" --import "$CONTAINERD_SOCK" pause sandbox operator node-agent >/dev/null
  # gVisor's shim serves pause containers from this image of the pause rootfs, with no
  # gofer (docs/adr/0013); it reads it from the directory it reads its config from.
  "$PYTHON" "$here/pause_erofs.py" "$(cat "$CACHE/images/pause.archive")" "$RUNSC_SHIM_CONFIG_DIR"
  # ... and sandbox containers from an image of the sandbox image's snapshot (adr/0014).
  "$PYTHON" "$here/rootfs_erofs.py" --ctr ctr --address "$CONTAINERD_SOCK" "$STATE/rootfs-images" \
    "$RUNSC_SHIM_CONFIG_DIR/rootfs-images" "$(cat "$CACHE/images/sandbox.archive")"
  local version name ref
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml")
  for name in sandbox operator node-agent; do
    ref=$(cat "$CACHE/images/$name.ref")
    # The install names each image by digest (docs/adr/0021); a pull records that name,
    # an import only the tag, so it is added as a pull would. The version tag is for the
    # conformance suite's own pods.
    ctr --address "$CONTAINERD_SOCK" -n k8s.io images tag --force "$ref" \
      "openblox.local/$name:$version" "openblox.local/$name@$(image_digest "$name")" >/dev/null
  done
  push_images
}

# Each image also in the project's registry, where a node that lacks it pulls it from.
push_images() {
  local name ref version
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml")
  for name in sandbox operator node-agent; do
    ref=$(cat "$CACHE/images/$name.ref")
    "$PYTHON" "$here/images/push.py" "$(cat "$CACHE/images/$name.archive")" "$REGISTRY_ADDRESS" \
      "$name" --tag "${ref##*:}" --tag "$version" >/dev/null
  done
}

# The manifest digest of the image build.sh last built as NAME.
image_digest() {
  "$PYTHON" "$repo/cluster/install_images.py" digest "$1" "$CACHE/images"
}

# ---------------------------------------------------------------- commands

cmd_up() {
  check_prereqs
  mkdir -p "$STATE/logs" "$STATE/run"
  local all=1 name
  for name in "${COMPONENTS[@]}"; do running "$name" || all=0; done
  local upgrading=()
  if ((all)) && kubectl_admin get --raw /readyz >/dev/null 2>&1; then
    link_binaries
    write_configs "$(default_ip)"
    read -r -a upgrading <<<"$(rebuilt_components)"
    if [[ $(settings_digest) != "$(cat "$STATE/run/settings.digest" 2>/dev/null)" ]]; then
      for name in kube-scheduler kubelet; do
        [[ " ${upgrading[*]} " == *" $name "* ]] || upgrading+=("$name")
      done
    fi
    if ((${#upgrading[@]} == 0)); then
      if [[ $(node_config_digest) != "$(cat "$STATE/run/containerd.config" 2>/dev/null)" ]]; then
        # Running shims and their containers outlive containerd; the kubelet reconnects.
        log "containerd's configuration or NRI plugin changed: restarting containerd"
        stop containerd
        start_containerd
      fi
      # A node started before the gvisor RuntimeClass had a node selector lacks the label.
      kubectl_admin label node "$NODE_NAME" "$GVISOR_NODE_LABEL=true" --overwrite >/dev/null
      log "already running; nothing to do"
      cmd_env
      return
    fi
    # A version in cluster/versions.env changed under a running node: those components
    # start again on their new binaries, on the same state (etcd's data, the shims and
    # their sandboxes, which outlive containerd and the kubelet).
    log "new binaries or settings for ${upgrading[*]}: restarting them"
    local i
    for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
      [[ " ${upgrading[*]} " == *" ${COMPONENTS[i]} "* ]] && stop "${COMPONENTS[i]}"
    done
  fi
  if ((${#upgrading[@]} == 0)) && ! running etcd; then
    # After `down`, a reboot or a crash: nothing of the node's may be trusted, so every
    # component starts again on a cleaned node; etcd's data (every object) is kept.
    # With etcd alive, only the missing components are started.
    for name in "${COMPONENTS[@]}"; do stop "$name"; done
    clean_node
  fi
  local ip; ip=$(default_ip)
  [[ -n $ip ]] || die "no IPv4 address on the default route's interface"
  link_binaries
  "$PYTHON" "$here/pki.py" "$STATE" "$NODE_NAME" "$ip" "$SERVICE_IP"
  write_configs "$ip"
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 \
    net.bridge.bridge-nf-call-ip6tables=1
  local pki=$STATE/pki

  # etcd first: data it cannot open stops `up` before anything else has started.
  start_etcd

  start_containerd

  start kube-apiserver "$BIN/kube-apiserver" \
    --advertise-address "$ip" --bind-address 0.0.0.0 --secure-port 6443 \
    --etcd-servers "https://127.0.0.1:$ETCD_CLIENT_PORT" --etcd-cafile "$pki/ca.crt" \
    --etcd-certfile "$pki/etcd-client.crt" --etcd-keyfile "$pki/etcd-client.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --client-ca-file "$pki/ca.crt" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$pki/ca.crt" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" \
    --service-account-signing-key-file "$pki/sa.key" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction \
    --allow-privileged=false --anonymous-auth=false --profiling=false \
    --endpoint-reconciler-type lease
  wait_for kube-apiserver 90 kubectl_admin get --raw /readyz

  bootstrap_objects

  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --use-service-account-credentials --leader-elect=false \
    --allocate-node-cidrs --cluster-cidr "$CLUSTER_CIDR" --node-cidr-mask-size 22 \
    --service-cluster-ip-range "$SERVICE_CIDR" --bind-address 127.0.0.1 --profiling=false

  start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$STATE/scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
    --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --profiling=false \
    --feature-gates "$FEATURE_GATES"

  start_registry
  import_images

  start kubelet "$BIN/kubelet" --config "$STATE/config/kubelet.yaml" \
    --kubeconfig "$STATE/kubelet.kubeconfig" --root-dir "$KUBELET_ROOT" \
    --hostname-override "$NODE_NAME" --node-ip "$ip" \
    --node-labels "$GVISOR_NODE_LABEL=true"

  start kube-proxy "$BIN/kube-proxy" --config "$STATE/config/kube-proxy.yaml"

  wait_for "node $NODE_NAME Ready" 120 kubectl_admin wait --for=condition=Ready \
    "node/$NODE_NAME" --timeout=1s

  # kube-router identifies itself by its Node object, so it starts once the node is in.
  start kube-router "$BIN/kube-router" --kubeconfig "$STATE/kube-router.kubeconfig" \
    --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
    --hostname-override "$NODE_NAME" --metrics-port 0 --health-port 20244
  wait_for "kube-router" 60 curl -fsS http://127.0.0.1:20244/healthz
  wait_for "default ServiceAccount" 60 kubectl_admin get serviceaccount default -n default
  settings_digest >"$STATE/run/settings.digest"
  log "cluster is up"
  cmd_env
}

cmd_down() {
  local name i
  if [[ ! -d $STATE/run ]]; then log "nothing to stop"; return; fi
  if [[ -S $CONTAINERD_SOCK ]] && running containerd; then
    # Stop sandboxes through the runtime first, so no shim or mount outlives containerd.
    stop kubelet
    local crictl=("$BIN/crictl" --runtime-endpoint "unix://$CONTAINERD_SOCK" --timeout 30s)
    "${crictl[@]}" rmp --all --force >/dev/null 2>&1 || true
  fi
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do stop "${COMPONENTS[i]}"; done
  clean_node
  # Rules our components installed: kube-proxy and kube-router clean their own chains
  # only while running, so flush what they leave behind.
  if [[ -x $BIN/kube-proxy ]]; then "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
  iptables-save 2>/dev/null | grep -q KUBE-ROUTER && {
    iptables-save | grep -v -E 'KUBE-ROUTER|KUBE-NWPLCY|KUBE-POD-FW|KUBE-SRC' | iptables-restore || true
  }
  ipset list -n 2>/dev/null | grep -E '^KUBE-' | xargs -r -n1 ipset destroy 2>/dev/null || true
  ip link del openblox0 2>/dev/null || true
  log "cluster is down; its objects are kept in $ETCD_DATA, caches in $CACHE"
}

# The one command that deletes the cluster's state: every object it held.
cmd_reset() {
  cmd_down
  log "deleting the cluster's state: every object it held (etcd's data in $ETCD_DATA),"
  log "  and the kubelet's files; certificates and caches in $CACHE are kept"
  rm -rf "$ETCD_DATA" "$ETCD_STAMP" "$KUBELET_ROOT" "$ROOT/cni-ipam"
  log "the next \`make up\` starts an empty cluster"
}

cmd_status() {
  local name state=0
  for name in "${COMPONENTS[@]}"; do
    if running "$name"; then echo "$name: running (pid $(cat "$(pidfile "$name")"))"
    else echo "$name: stopped"; state=1; fi
  done
  if ((state == 0)); then kubectl_admin get nodes -o wide; fi
  return $state
}

cmd_env() { echo "export KUBECONFIG=$KUBECONFIG_ADMIN PATH=$BIN:\$PATH"; }

# Parts of `up`, alone, for the tests of crash recovery (tests/cluster/test_zz_restarts.py),
# which point OPENBLOX_ROOT, OPENBLOX_RUN and the etcd ports at a node of their own.
cmd_etcd_check() {
  mkdir -p "$STATE/logs" "$STATE/run"
  "$PYTHON" "$here/pki.py" "$STATE" "$NODE_NAME" 127.0.0.1 "$SERVICE_IP" >/dev/null
  start_etcd
  stop etcd
  log "etcd opened the data in $ETCD_DATA"
}

case ${1:-} in
  install) cmd_install ;;
  up) cmd_up ;;
  down) cmd_down ;;
  reset) cmd_reset ;;
  status) cmd_status ;;
  env) cmd_env ;;
  images) running containerd || die "containerd is not running; run: $0 up"
    running registry || start_registry
    import_images ;;
  registry) link_binaries; write_configs "$(default_ip)"; start_registry ;;
  clean-node) mkdir -p "$STATE/run"; clean_node ;;
  etcd-check) cmd_etcd_check ;;
  *) echo "usage: $0 install|up|down|reset|status|env|images|registry" >&2; exit 2 ;;
esac
