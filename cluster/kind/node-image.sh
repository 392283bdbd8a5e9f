#!/usr/bin/env bash
# Build the kind node images here, with nothing pulled, and import them into the Docker
# daemon that DOCKER_HOST names (cluster/docker.sh). Prints two references: the node
# with gVisor, and the same node without it (no runsc, no runsc handler).
#
#   cluster/kind/node-image.sh           build (cached) and import; print the references
#   cluster/kind/node-image.sh rootfs    only the debootstrapped root filesystem (cached)
#
# The root filesystem is Debian bookworm from debootstrap (node/packages), kind's own
# base-image files (entrypoint, systemd units, kubelet drop-ins) taken from the kind
# module at build time, and the project's builds (cluster/build.sh kind-all): kubeadm,
# kubelet, kubectl, containerd, crictl, gVisor's runsc and its shim as released (patched
# only by the constant this machine forces, docs/adr/0004). containerd's configuration is
# kind's (node/containerd.toml) plus the runsc handler gVisor's install docs give
# (node/runsc-handler.toml, node/runsc.toml); nothing of openblox's, which arrives with
# `kubectl apply -k manifests` (docs/kind.md). Every
# image kubeadm and the cluster need (cluster/images: control plane, etcd, CoreDNS, pause,
# kube-proxy and kube-router) is imported into the node's containerd at build time, so a
# cluster from it pulls nothing. The tag is a hash of every input: an image from an older
# build has another tag, and `cluster/kind/kind.sh up` replaces a cluster running one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../versions.env
source "$repo/cluster/versions.env"
CACHE=${OPENBLOX_CACHE:-/var/cache/openblox}
PYTHON=${PYTHON:-python3}
NODE_REPO=openblox.local/kind-node
# Every image the node's containerd holds at start (cluster/images).
NODE_IMAGES=(pause kube-apiserver kube-controller-manager kube-scheduler etcd coredns kube-network)

IMAGES_DIR=$repo/cluster/images
CACHE_DIR=$CACHE/images
# shellcheck source=../images/lib.sh
source "$IMAGES_DIR/lib.sh"
# shellcheck source=../images/base/base.sh
source "$IMAGES_DIR/base/base.sh"

docker_cli() { "${DOCKER_CLI:-docker}" "$@"; }

rootfs_key() {
  {
    echo "kind-node rootfs v1 $DEBIAN_SUITE $DEBIAN_MIRROR $(dpkg --print-architecture)"
    hash_files "$here/node/packages"
  } | sha256_of_stdin
}
rootfs_tarball() { echo "$CACHE_DIR/kind/rootfs-$DEBIAN_SUITE-$(rootfs_key | cut -c1-16).tar"; }

_node_debootstrap() {
  local root=$1 logf=$WORK_DIR/debootstrap.log
  need debootstrap unshare chroot
  local -a keyring=()
  [[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]] &&
    keyring=(--keyring=/usr/share/keyrings/debian-archive-keyring.gpg)
  log "debootstrap $DEBIAN_SUITE for the kind node (first time: a few minutes)"
  if ! unshare --mount --propagation private -- debootstrap --variant=minbase \
      --include="$(package_list "$here/node/packages")" --arch="$(dpkg --print-architecture)" \
      "${keyring[@]}" "$DEBIAN_SUITE" "$root" "$DEBIAN_MIRROR" >"$logf" 2>&1; then
    tail -n 30 "$logf" >&2
    die "debootstrap failed"
  fi
  strip_rootfs "$root"
}

# The node build's own lock, not the image cache's (cluster/images/build.sh): the embedded
# cluster's `cluster.sh images` must not wait minutes for a node image that `make test`
# builds in the background (cluster/kind/prebuild.sh).
node_build_lock() {
  mkdir -p "$CACHE_DIR/kind"
  exec {lock_fd}>"$CACHE_DIR/kind/.lock"
  flock "$lock_fd"
}

# Under the node build's own lock, so in a work directory of its own: init_work_dir removes
# every other build.* it finds as left by a killed build, which is true only of the builds
# its caller's lock excludes. In the image cache's work directory it removed a live
# operator image build that `cluster.sh images` ran beside the background prebuild.
init_node_work_dir() {
  local CACHE_DIR=$CACHE_DIR/kind
  init_work_dir
}

if [[ ${1:-} == rootfs ]]; then
  node_build_lock
  init_node_work_dir
  [[ -f $(rootfs_tarball) ]] || cached_tarball "$(rootfs_tarball)" _node_debootstrap "$WORK_DIR/node"
  exit 0
fi

docker_cli version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
  die "no Docker daemon answers at ${DOCKER_HOST:-the default socket}; start one: cluster/docker.sh start"

"$repo/cluster/build.sh" kind-all
PYTHON=$PYTHON "$IMAGES_DIR/build.sh" "${NODE_IMAGES[@]}" >/dev/null

kind_dir=$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" |
  "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
base_files=$kind_dir/images/base/files
[[ -f $base_files/usr/local/bin/entrypoint ]] || die "kind $KIND_VERSION has no images/base/files/usr/local/bin/entrypoint"

k8s=$CACHE/kubernetes-$KUBERNETES_VERSION
ctd=$CACHE/containerd-$CONTAINERD_VERSION
gvisor=$CACHE/gvisor-$GVISOR_VERSION
declare -A NODE_BINARIES=(
  [/usr/bin/kubeadm]=$CACHE/kubeadm-$KUBERNETES_VERSION/kubeadm
  [/usr/bin/kubelet]=$k8s/kubelet
  [/usr/bin/kubectl]=$k8s/kubectl
  [/usr/local/bin/containerd]=$ctd/containerd
  [/usr/local/bin/containerd-shim-runc-v2]=$ctd/containerd-shim-runc-v2
  [/usr/local/bin/ctr]=$ctd/ctr
  [/usr/local/bin/crictl]=$CACHE/crictl-$CRI_TOOLS_VERSION/crictl
  [/usr/local/bin/runsc]=$gvisor/runsc
  [/usr/local/bin/containerd-shim-runsc-v1]=$gvisor/stock/containerd-shim-runsc-v1
)

# The archive build.sh just built or found for a node image.
archive_of() { cat "$CACHE_DIR/$1.archive"; }

node_key() {
  {
    echo "kind-node v1 kind $KIND_VERSION kubernetes $KUBERNETES_VERSION rootfs $(rootfs_key)"
    hash_files "$here/node-image.sh" "$IMAGES_DIR/lib.sh"
    hash_dir "$here/node"
    (cd "$base_files" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    local dest
    for dest in $(printf '%s\n' "${!NODE_BINARIES[@]}" | LC_ALL=C sort); do
      echo "$dest $(sha256sum <"${NODE_BINARIES[$dest]}" | cut -d' ' -f1)"
    done
    local img
    for img in "${NODE_IMAGES[@]}"; do basename "$(archive_of "$img")"; done
  } | sha256_of_stdin
}

# kind's base image steps (images/base/Dockerfile): its files, and systemd trimmed to
# what a node runs.
install_kind_base() {
  local root=$1
  install -m 0755 "$base_files"/usr/local/bin/* "$root/usr/local/bin/"
  cp -r "$base_files/kind" "$root/kind"
  chmod -R u=rwX,go=rX "$root/kind"
  chmod 0755 "$root"/kind/bin/*
  mkdir -p "$root/LICENSES"
  install -m 0644 "$base_files"/LICENSES/* "$root/LICENSES/"
  install -m 0644 "$base_files/etc/crictl.yaml" "$root/etc/"
  install -m 0644 "$base_files"/etc/default/* "$root/etc/default/"
  install -m 0644 "$base_files"/etc/sysctl.d/* "$root/etc/sysctl.d/"
  install -m 0644 "$base_files"/etc/systemd/system/*.service "$base_files"/etc/systemd/system/*.slice \
    "$root/etc/systemd/system/"
  install -d "$root/etc/systemd/system/kubelet.service.d"
  install -m 0644 "$base_files"/etc/systemd/system/kubelet.service.d/* "$root/etc/systemd/system/kubelet.service.d/"
  find "$root/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
  rm -f "$root"/lib/systemd/system/multi-user.target.wants/* "$root"/etc/systemd/system/*.wants/* \
    "$root"/lib/systemd/system/local-fs.target.wants/* "$root"/lib/systemd/system/sockets.target.wants/*udev* \
    "$root"/lib/systemd/system/sockets.target.wants/*initctl* "$root"/lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" >>"$root/etc/systemd/journald.conf"
  ln -sf /usr/lib/systemd/systemd "$root/sbin/init"
  chroot_logged "$root" systemctl-enable '
    systemctl enable kubelet.service containerd.service undo-mount-hacks.service
    systemctl mask systemd-binfmt.service
  '
  install -d "$root/etc/kubernetes/manifests" "$root/etc/cni/net.d" "$root/opt/cni"
  ln -sfn /usr/lib/cni "$root/opt/cni/bin"
}

install_node_files() {
  local root=$1 dest
  for dest in "${!NODE_BINARIES[@]}"; do
    install -D -m 0755 "${NODE_BINARIES[$dest]}" "$root$dest"
  done
  echo "$KUBERNETES_VERSION" >"$root/kind/version"
  install -d "$root/kind/manifests" "$root/etc/containerd"
  # One file: containerd's imports replace a plugin's whole section, so the handler
  # cannot live in a drop-in next to the CRI plugin's settings.
  cat "$here/node/containerd.toml" "$here/node/runsc-handler.toml" >"$root/etc/containerd/config.toml"
  chmod 0644 "$root/etc/containerd/config.toml"
  # runsc's options, as gVisor's install docs have them: networking off, and the platform
  # this machine runs. No config of the shim's own (/etc/containerd/runsc/config.toml):
  # it runs with its defaults, one shim per container.
  install -m 0644 "$here/node/runsc.toml" "$root/etc/containerd/runsc.toml"
  install -m 0644 "$here/node/default-storage.yaml" "$root/kind/manifests/default-storage.yaml"
  install -m 0755 "$here/node/openblox-entrypoint" "$root/usr/local/bin/openblox-entrypoint"
  install -m 0755 "$here/node/openblox-cgroup-unbind" "$root/usr/local/bin/openblox-cgroup-unbind"
  install -D -m 0644 "$here/node/containerd-openblox.conf" "$root/etc/systemd/system/containerd.service.d/10-openblox.conf"
  # kind's base runtime spec: containerd's default with kind's product_uuid hook and no
  # rlimits (images/base/Dockerfile).
  "$ctd/ctr" oci spec | "$PYTHON" -c '
import json, sys
spec = json.load(sys.stdin)
spec.setdefault("hooks", {}).setdefault("createContainer", []).append({"path": "/kind/bin/mount-product-files.sh"})
spec["process"].pop("rlimits", None)
json.dump(spec, sys.stdout, indent=2)' >"$root/etc/containerd/cri-base.json"
}

# preload_images ROOT : import every node image into ROOT's containerd store, with a
# containerd of our own that only this build talks to.
preload_images() {
  local root=$1 dir=$WORK_DIR/containerd img pid
  mkdir -p "$dir"
  cat >"$dir/config.toml" <<EOF
version = 3
root = "$root/var/lib/containerd"
state = "$dir/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images", "io.containerd.nri.v1.nri"]
[grpc]
  address = "$dir/containerd.sock"
EOF
  "$ctd/containerd" --config "$dir/config.toml" >"$dir/containerd.log" 2>&1 &
  pid=$!
  # shellcheck disable=SC2064
  trap "kill $pid 2>/dev/null; _cleanup_work_dir" EXIT
  for _ in $(seq 100); do [[ -S $dir/containerd.sock ]] && break; sleep 0.1; done
  local ctr=("$ctd/ctr" --address "$dir/containerd.sock" -n k8s.io)
  for img in "${NODE_IMAGES[@]}"; do
    log "preloading $(cat "$CACHE_DIR/$img.ref")"
    "${ctr[@]}" images import --snapshotter overlayfs "$(archive_of "$img")" >/dev/null
  done
  "${ctr[@]}" images tag --force "$(cat "$CACHE_DIR/kube-network.ref")" \
    "openblox.local/kube-proxy:$KUBERNETES_VERSION" >/dev/null
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  trap _cleanup_work_dir EXIT
}

key=$(node_key | cut -c1-16)
ref=$NODE_REPO:$key
plain=$NODE_REPO:$key-no-gvisor
if docker_cli image inspect "$ref" >/dev/null 2>&1 && docker_cli image inspect "$plain" >/dev/null 2>&1; then
  log "kind node image cached ($ref)"
  printf '%s\n%s\n' "$ref" "$plain"
  exit 0
fi

node_build_lock
init_node_work_dir
start=$SECONDS
root=$WORK_DIR/node
cached_tarball "$(rootfs_tarball)" _node_debootstrap "$root"
install_kind_base "$root"
install_node_files "$root"
preload_images "$root"
log "importing $ref into Docker"
tar -C "$root" --numeric-owner --one-file-system -cf - . |
  docker_cli import --change 'ENTRYPOINT ["/usr/local/bin/openblox-entrypoint", "/usr/local/bin/entrypoint", "/sbin/init"]' \
    --change 'ENV container=docker' --change "LABEL sh.openblox.kind-node.key=$key" - "$ref" >/dev/null
# The node without gVisor: the same image less runsc, its shim and the runsc handler.
printf 'FROM %s\nRUN rm /usr/local/bin/runsc /usr/local/bin/containerd-shim-runsc-v1 /etc/containerd/runsc.toml && sed -i "/^# BEGIN runsc handler/,\\$d" /etc/containerd/config.toml && ! grep -q runsc /etc/containerd/config.toml\n' "$ref" |
  docker_cli build --network none -q -t "$plain" - >/dev/null
log "kind node images built in $((SECONDS - start))s"
printf '%s\n%s\n' "$ref" "$plain"
