#!/usr/bin/env bash
# A kind cluster of three nodes built entirely here (docs/kind.md): one control plane and
# two workers, on the project's own dockerd (cluster/docker.sh) and node images
# (cluster/kind/node-image.sh). The control plane and worker (first) have gVisor and the
# label openblox.sh/gvisor=true; the second worker has no gVisor at all.
#
#   cluster/kind/kind.sh build    build (cached) the node images and the openblox images, start
#                                 dockerd; creates no cluster
#   cluster/kind/kind.sh up       build (cached), start dockerd, create or reuse the cluster,
#                                 load the openblox images; prints the export lines
#   cluster/kind/kind.sh install  up, then install openblox as a user would and print 42
#   cluster/kind/kind.sh down     delete the kind cluster (dockerd and caches kept)
#   cluster/kind/kind.sh env      print the export lines (KUBECONFIG, DOCKER_HOST, PATH)
#   cluster/kind/kind.sh check GVISOR PLAIN
#                                 whether `up` with these node images would reuse the cluster
#                                 (exit 0) or recreate it, and why (exit 1); changes nothing
#
# Environment: OPENBLOX_KIND_NAME (cluster name, default openblox).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../versions.env
source "$repo/cluster/versions.env"
CACHE=${OPENBLOX_CACHE:-/var/cache/openblox}
ROOT=${OPENBLOX_ROOT:-/var/lib/openblox}
NAME=${OPENBLOX_KIND_NAME:-openblox}
STATE=$ROOT/kind
KUBECONFIG_FILE=$STATE/$NAME.kubeconfig
PYTHON=${PYTHON:-python3}
GVISOR_LABEL=openblox.sh/gvisor
# The local registry, as kind's local-registry guide runs one: a container on kind's
# network, published on the host's loopback; pods name its images localhost:PORT/...,
# which each node's containerd resolves to the container (docs/kind.md, docs/adr/0021).
REGISTRY_CONTAINER=$NAME-registry
REGISTRY_PORT=${OPENBLOX_KIND_REGISTRY_PORT:-5002}
REGISTRY_HOST=localhost:$REGISTRY_PORT
CERTS_DIR=/etc/containerd/certs.d
# kind finds `docker` (our shim, cluster/kind/bin/docker) and kubectl on PATH.
export PATH=$here/bin:$CACHE/kind-$KIND_VERSION:$CACHE/kubernetes-$KUBERNETES_VERSION:$PATH

log() { printf '[kind] %s\n' "$*" >&2; }
die() { printf '[kind] error: %s\n' "$*" >&2; exit 1; }

cmd_env() {
  "$repo/cluster/docker.sh" env
  echo "export KUBECONFIG=$KUBECONFIG_FILE"
}

kctl() { kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"; }

cluster_exists() { kind get clusters 2>/dev/null | grep -qx "$NAME"; }

# The node image a node container runs, or nothing.
node_image() { docker inspect -f '{{.Config.Image}}' "$1" 2>/dev/null || true; }

# Why the existing cluster cannot be reused with node images GVISOR and PLAIN (a node
# from another build, a node container not running, an API server that does not
# answer), or nothing when it can; refreshes its kubeconfig when it can.
stale_reason() {
  local gvisor=$1 plain=$2 node have
  for node in $(kind get nodes --name "$NAME"); do
    have=$(node_image "$node")
    if [[ $have != "$gvisor" && $have != "$plain" ]]; then
      echo "kind cluster $NAME: node $node runs ${have:-nothing known}, not this build's node image"
      return
    fi
    if [[ $(docker inspect -f '{{.State.Status}}' "$node" 2>/dev/null) != running ]]; then
      echo "kind cluster $NAME: node $node is not running ($(docker inspect -f '{{.State.Status}}' "$node" 2>/dev/null || echo gone))"
      return
    fi
    if ! docker exec "$node" grep -q "config_path = \"$CERTS_DIR\"" /etc/containerd/config.toml; then
      echo "kind cluster $NAME: node $node's containerd reads no registry hosts from $CERTS_DIR"
      return
    fi
  done
  if ! { kind get kubeconfig --name "$NAME" >"$KUBECONFIG_FILE.partial" 2>/dev/null &&
      mv "$KUBECONFIG_FILE.partial" "$KUBECONFIG_FILE" && kctl get --raw /readyz >/dev/null 2>&1; }; then
    echo "kind cluster $NAME: its API server does not answer"
  fi
}

# `check GVISOR PLAIN`: say whether `up` would reuse the cluster, changing nothing.
cmd_check() {
  [[ $# == 2 ]] || die "usage: $0 check GVISOR_NODE_IMAGE PLAIN_NODE_IMAGE"
  eval "$("$repo/cluster/docker.sh" env)"
  export DOCKER_HOST
  cluster_exists || { echo "no kind cluster $NAME"; exit 1; }
  local stale
  stale=$(stale_reason "$1" "$2")
  [[ -z $stale ]] || { echo "$stale"; exit 1; }
  echo "kind cluster $NAME runs $1 and $2: reused"
}

write_config() {
  local gvisor=$1 plain=$2
  mkdir -p "$STATE"
  cat >"$STATE/$NAME.yaml" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  ipFamily: ipv4
  # kindnetd cannot be had here: kube-router (cluster/kind/kube-router.yaml) instead.
  disableDefaultCNI: true
  # Apart from the embedded cluster's ranges, so a reader never confuses the two.
  podSubnet: 10.248.0.0/16
  serviceSubnet: 10.97.0.0/16
# Kubernetes 1.36 and 1.37 charge a RuntimeClass's overhead twice once this gate's pod
# status is written (kubernetes/kubernetes#139627); off on every component, as on the
# embedded node (docs/adr/0016).
featureGates:
  InPlacePodLevelResourcesVerticalScaling: false
# As kind's local-registry guide does: containerd reads each registry's hosts.toml, which
# kind.sh writes for the local registry once the nodes are up.
containerdConfigPatches:
- |-
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$CERTS_DIR"
kubeadmConfigPatches:
# Every image is built here and preloaded under openblox.local (cluster/images).
- |
  kind: ClusterConfiguration
  imageRepository: openblox.local
  etcd:
    local:
      imageTag: $ETCD_VERSION
  dns:
    imageTag: $COREDNS_VERSION
# The cgroup driver comes from containerd (cgroupfs, as on the embedded node). This VM
# is cgroup v1 (hybrid), which the kubelet refuses since 1.35 unless told.
- |
  kind: KubeletConfiguration
  failCgroupV1: false
# kubeadm gives the API server one minute by default to answer its first calls; on two
# cores beside the embedded cluster at the end of its suite, the first cold create took
# longer (kubeadm init: "unable to create ClusterRoleBinding: context deadline exceeded").
- |
  kind: JoinConfiguration
  timeouts:
    controlPlaneComponentHealthCheck: 10m0s
    kubeletHealthCheck: 10m0s
    kubernetesAPICall: 5m0s
    etcdAPICall: 5m0s
    tlsBootstrap: 10m0s
    discovery: 10m0s
nodes:
- role: control-plane
  image: $gvisor
  labels: {$GVISOR_LABEL: "true"}
  # Sandboxes may run here too: with only one other gVisor node, a Sandbox whose worker
  # is lost needs somewhere to go.
  kubeadmConfigPatches:
  - |
    kind: InitConfiguration
    nodeRegistration:
      taints: []
    timeouts:
      controlPlaneComponentHealthCheck: 10m0s
      kubeletHealthCheck: 10m0s
      kubernetesAPICall: 5m0s
      etcdAPICall: 5m0s
- role: worker
  image: $gvisor
  labels: {$GVISOR_LABEL: "true"}
- role: worker
  image: $plain
EOF
}

# Docker started, the node images built (cached): sets NODE_GVISOR and NODE_PLAIN.
build_node_images() {
  [[ $(id -u) == 0 ]] || die "run as root (dockerd, debootstrap)"
  command -v go >/dev/null || die "Go is needed to build kind and the node's binaries (https://go.dev/doc/install)"
  "$repo/cluster/docker.sh" install
  eval "$("$repo/cluster/docker.sh" start)"
  export DOCKER_HOST
  local refs
  mapfile -t refs < <(PYTHON=$PYTHON "$here/node-image.sh")
  NODE_GVISOR=${refs[0]:-} NODE_PLAIN=${refs[1]:-}
  [[ -n $NODE_GVISOR && -n $NODE_PLAIN ]] || die "node-image.sh printed no image references"
}

cmd_build() {
  build_node_images
  PYTHON=$PYTHON "$repo/cluster/images/build.sh" sandbox operator node-agent registry >/dev/null
  log "node images $NODE_GVISOR and $NODE_PLAIN"
}

cmd_up() {
  build_node_images
  local gvisor=$NODE_GVISOR plain=$NODE_PLAIN
  if cluster_exists; then
    local stale
    stale=$(stale_reason "$gvisor" "$plain")
    if [[ -z $stale ]]; then
      log "kind cluster $NAME already runs this build"
    else
      log "$stale: recreating the cluster"
      kind delete cluster --name "$NAME" --kubeconfig "$KUBECONFIG_FILE.stale"
      rm -f "$KUBECONFIG_FILE.stale"
    fi
  fi
  if ! cluster_exists; then
    write_config "$gvisor" "$plain"
    log "creating kind cluster $NAME (3 nodes)"
    kind create cluster --name "$NAME" --config "$STATE/$NAME.yaml" --kubeconfig "$KUBECONFIG_FILE"
  fi
  sed "s|KUBE_NETWORK_IMAGE|$(cat "$CACHE/images/kube-network.ref")|" "$here/kube-router.yaml" |
    kctl apply --server-side --force-conflicts -f - >/dev/null
  kctl rollout status -n kube-system daemonset/kube-router --timeout=300s >&2
  kctl wait --for=condition=Ready nodes --all --timeout=300s >&2
  start_registry
  push_images
  cmd_env
}

# The local registry's container, from the image built here (cluster/images/registry), on
# kind's network, its storage under $STATE/registry so a new cluster finds it filled; and
# each node's hosts.toml naming it. A container from another build is replaced.
start_registry() {
  local ref address node
  PYTHON=$PYTHON "$repo/cluster/images/build.sh" registry >/dev/null
  ref=$(cat "$CACHE/images/registry.ref")
  if ! docker image inspect "$ref" >/dev/null 2>&1; then
    # This dockerd keeps the classic image store, which loads no OCI layout: the image's
    # one layer is imported, with its entry point.
    local archive entrypoint
    archive=$(cat "$CACHE/images/registry.archive")
    entrypoint=$("$PYTHON" "$repo/cluster/images/oci.py" inspect "$archive" |
      "$PYTHON" -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["config"]["Entrypoint"]))')
    "$PYTHON" "$repo/cluster/images/oci.py" layer "$archive" |
      docker import --change "ENTRYPOINT $entrypoint" - "$ref" >/dev/null
  fi
  if [[ $(docker inspect -f '{{.Config.Image}}' "$REGISTRY_CONTAINER" 2>/dev/null) != "$ref" ]]; then
    docker rm -f "$REGISTRY_CONTAINER" >/dev/null 2>&1 || true
    mkdir -p "$STATE/registry"
    log "starting the local registry $REGISTRY_CONTAINER ($REGISTRY_HOST)"
    docker run -d --restart=always --name "$REGISTRY_CONTAINER" --network kind \
      -p "127.0.0.1:$REGISTRY_PORT:5000" -v "$STATE/registry:/var/lib/registry" \
      --read-only --cap-drop ALL --security-opt no-new-privileges "$ref" >/dev/null
  fi
  docker start "$REGISTRY_CONTAINER" >/dev/null
  for _ in $(seq 120); do curl -fsS "http://127.0.0.1:$REGISTRY_PORT/v2/" >/dev/null 2>&1 && break; sleep 0.25; done
  curl -fsS "http://127.0.0.1:$REGISTRY_PORT/v2/" >/dev/null ||
    die "the local registry does not answer on 127.0.0.1:$REGISTRY_PORT; see: docker logs $REGISTRY_CONTAINER"
  # By address: dockerd runs without iptables here, so its embedded DNS is not relied on.
  address=$(docker inspect -f '{{(index .NetworkSettings.Networks "kind").IPAddress}}' "$REGISTRY_CONTAINER")
  # openblox.local too, the name the node's own images and the conformance suite's
  # instruments carry: a pull of it reaches this registry, never a name lookup.
  local host
  for node in $(kind get nodes --name "$NAME"); do
    for host in "$REGISTRY_HOST" openblox.local; do
      docker exec "$node" mkdir -p "$CERTS_DIR/$host"
      printf 'server = "http://%s:5000"\n[host."http://%s:5000"]\n  capabilities = ["pull", "resolve"]\n' \
        "$address" "$address" | docker exec -i "$node" tee "$CERTS_DIR/$host/hosts.toml" >/dev/null
    done
  done
  # What the install overlay names the images by (cluster/embedded.py).
  echo "$REGISTRY_HOST" >"$STATE/registry-repository"
}

# openblox's images into the local registry, where the nodes pull them from by digest
# (and by the project's version: the conformance suite's Job and canaries name them so,
# as openblox.local/NAME:VERSION, which the nodes resolve to this registry too).
push_images() {
  local name version
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml")
  PYTHON=$PYTHON "$repo/cluster/images/build.sh" sandbox operator node-agent >/dev/null
  for name in sandbox operator node-agent; do
    "$PYTHON" "$repo/cluster/images/push.py" "$(cat "$CACHE/images/$name.archive")" \
      "127.0.0.1:$REGISTRY_PORT" "$name" --tag "$version" >/dev/null
  done
}

cmd_down() {
  command -v kind >/dev/null || die "kind is not built; nothing to delete"
  eval "$("$repo/cluster/docker.sh" env)"
  export DOCKER_HOST
  if cluster_exists; then kind delete cluster --name "$NAME" --kubeconfig "$KUBECONFIG_FILE"; else log "no kind cluster $NAME"; fi
  docker rm -f "$REGISTRY_CONTAINER" >/dev/null 2>&1 || true
  rm -f "$KUBECONFIG_FILE" "$STATE/registry-repository"
}

case ${1:-} in
  build) cmd_build ;;
  up) cmd_up ;;
  install) cmd_up >/dev/null
    KUBECONFIG=$KUBECONFIG_FILE "$PYTHON" "$repo/cluster/embedded.py" up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  check) shift; cmd_check "$@" ;;
  *) echo "usage: $0 build|up|install|down|env|check" >&2; exit 2 ;;
esac
