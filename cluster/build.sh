#!/usr/bin/env bash
# Build every node binary the embedded cluster needs from source, through the Go module
# proxy, into a cache outside the repository keyed by version. A second run is a no-op.
#   cluster/build.sh [kubernetes|etcd|containerd|crictl|kube-router|gvisor|all]
#   cluster/build.sh [kubeadm|kind|coredns|gvisor-stock|kind-all]   what the kind node image adds
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
CACHE=${OPENBLOX_CACHE:-/var/cache/openblox}
export GOFLAGS="-buildvcs=false -mod=mod" CGO_ENABLED=0
mkdir -p "$CACHE"

log() { printf '[build] %s\n' "$*" >&2; }

# wrapped_build OUT MODULE VERSION SIBLING_VERSION LDFLAGS PKG...
wrapped_build() {
  local out=$1 module=$2 version=$3 sibling=$4 ldflags=$5; shift 5
  local work; work=$(mktemp -d)
  python3 "$here/gowrap.py" "$work" "$module" "$version" "$sibling"
  mkdir -p "$out.partial"
  (cd "$work" && go build -trimpath -ldflags "$ldflags" -o "$out.partial/" "$@")
  rm -rf "$work" "$out"
  mv "$out.partial" "$out"
}

# kubernetes_build OUT PKG... : packages of k8s.io/kubernetes at KUBERNETES_VERSION, with
# the version stamp `kubectl version` and the kubelet report.
kubernetes_build() {
  local out=$1; shift
  local v=${KUBERNETES_VERSION#v} minor; minor=$(cut -d. -f2 <<<"$v")
  local ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  wrapped_build "$out" k8s.io/kubernetes "$KUBERNETES_VERSION" "v0.${v#1.}" "$ld" "$@"
}

build_kubernetes() {
  local out=$CACHE/kubernetes-$KUBERNETES_VERSION
  [[ -x $out/kubelet ]] && { log "kubernetes $KUBERNETES_VERSION cached"; return; }
  log "building kubernetes $KUBERNETES_VERSION (first time: several minutes on 2 cores)"
  kubernetes_build "$out" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl
}

# kubeadm from the same module and version as the rest of Kubernetes, with the same
# version stamp: the Go build cache makes this an incremental build after `kubernetes`.
build_kubeadm() {
  local out=$CACHE/kubeadm-$KUBERNETES_VERSION
  [[ -x $out/kubeadm ]] && { log "kubeadm $KUBERNETES_VERSION cached"; return; }
  log "building kubeadm $KUBERNETES_VERSION"
  kubernetes_build "$out" \
    k8s.io/kubernetes/cmd/kubeadm
}

build_etcd() {
  local out=$CACHE/etcd-$ETCD_VERSION
  [[ -x $out/server ]] && { log "etcd $ETCD_VERSION cached"; return; }
  log "building etcd $ETCD_VERSION"
  wrapped_build "$out" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "$ETCD_VERSION" "-s -w" \
    go.etcd.io/etcd/server/v3
}

# go_install NAME VERSION PKG... : modules that build with plain `go install`.
go_install() {
  local name=$1 version=$2; shift 2
  local out=$CACHE/$name-$version
  [[ -f $out/.done ]] && { log "$name $version cached"; return; }
  log "building $name $version"
  rm -rf "$out"; mkdir -p "$out"
  for pkg in "$@"; do GOBIN=$out GOFLAGS=-buildvcs=false go install -trimpath -ldflags "-s -w" "$pkg@$version"; done
  touch "$out/.done"
}

# gVisor's containerd shim (package gvisor.dev/gvisor/shim), built from the same module
# version with five local changes (docs/adr/0004, docs/adr/0012, docs/adr/0013):
# - it sets its own oom_score_adj to -999, which needs CAP_SYS_RESOURCE, and root on this
#   kind of machine does not have it; the patched shim keeps the score it inherits from
#   containerd instead;
# - it waits for a container's exit with `runsc wait`'s one RPC to the sandbox, made from
#   the shim (pkg/shim/v1/proc/sandbox_wait.go), instead of keeping a `runsc wait` process
#   per container alive (about 3 MiB of host memory each);
# - it serves a pod's pause container from the node's EROFS image of the pause rootfs
#   (pkg/shim/v1/runsc/pause_rootfs.go), so that container has no gofer (about 5 MiB);
# - its copy of runsc/specutils/seccomp has no syscall table
#   (runsc/specutils/seccomp/no_syscall_table.go), so the shim does not carry the
#   Sentry's kernel packages (about 1 MiB of heap each);
# - a shim still serving a pod's other container answers Shutdown with an empty message,
#   not a nil one that ttrpc cannot send (containerd 2 fails the task's delete on it).
# Each file under cluster/gvisor-shim/ is added at the same path in gVisor's tree; the
# patch's Go tests run before the build. runsc itself is built from the unchanged module.
# The stamp beside the binary names the patch, so a changed patch rebuilds the shim.
build_runsc_shim() {
  local out=$CACHE/gvisor-$GVISOR_VERSION patch=$here/gvisor-shim
  local stamp; stamp=$(cd "$patch" && find . -type f -name '*.go' | LC_ALL=C sort | xargs cat |
    cat - <(declare -f build_runsc_shim) | sha256sum | cut -d' ' -f1)
  [[ -x $out/containerd-shim-runsc-v1 && $(cat "$out/containerd-shim-runsc-v1.patch" 2>/dev/null) == "$stamp" ]] &&
    { log "gvisor shim cached"; return; }
  log "building gvisor shim $GVISOR_VERSION"
  local src; src=$(GOFLAGS=-mod=mod go mod download -json "gvisor.dev/gvisor@$GVISOR_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  local work; work=$(mktemp -d)
  cp -r "$src/." "$work/"
  chmod -R u+w "$work"
  local manager=$work/pkg/shim/v1/manager.go init=$work/pkg/shim/v1/proc/init.go
  local service=$work/pkg/shim/v1/runsc/service.go seccomp=$work/runsc/specutils/seccomp/seccomp.go
  local redirector=$work/pkg/shim/v1/service.go
  local wait_call='status, err := p.runtime.Wait(context.Background(), p.id)'
  local cgroup_line='updated = setPodCgroup(spec) || updated'
  local nil_reply='return resp, errgrpc.ToGRPC(nil)'
  grep -q 'oomScoreMax = -999' "$manager" && [[ $(grep -cF "$wait_call" "$init") == 1 ]] &&
    [[ $(grep -cF "$cgroup_line" "$service") == 1 ]] && grep -q '^func lookupSyscallNo(' "$seccomp" &&
    [[ $(grep -cF "$nil_reply" "$redirector") == 1 ]] ||
    { rm -rf "$work"; echo "gvisor shim: a patched line moved; update build.sh" >&2; return 1; }
  sed -i 's/oomScoreMax = -999/oomScoreMax = 0/' "$manager"
  # A shim that still serves a pod's other container (grouping) answers Shutdown with a nil
  # message, which ttrpc refuses to send; containerd 2 then fails the task's delete and the
  # container never leaves its pod. An empty answer is what the API wants (ADR 0016).
  sed -i 's/return resp, errgrpc\.ToGRPC(nil)/return \&types.Empty{}, nil/' "$redirector"
  sed -i 's/p\.runtime\.Wait(context\.Background(), p\.id)/waitForContainer(p.runtime, p.id)/' "$init"
  sed -i 's/^\(\s*\)updated = setPodCgroup(spec) || updated$/&\n\1updated = servePauseFromImage(spec, rootfs) || updated\n\1updated = serveContainerFromImage(spec, r.Rootfs, rootfs) || updated/' "$service"
  # lookupSyscallNo is the only user of these three imports in seccomp.go.
  sed -i '/^\s*"gvisor.dev\/gvisor\/pkg\/sentry\/kernel"$/d; /^\s*slinux "gvisor.dev\/gvisor\/pkg\/sentry\/syscalls\/linux"$/d
    /^\s*"gvisor.dev\/gvisor\/pkg\/abi\/linux"$/d; /^func lookupSyscallNo(/,/^}/d' "$seccomp"
  cp -r "$patch/." "$work/"
  grep -q 'waitForContainer(p.runtime, p.id)' "$init" && grep -qF 'return &types.Empty{}, nil' "$redirector" &&
    grep -q 'updated = servePauseFromImage(spec, rootfs) || updated' "$service" &&
    grep -q 'updated = serveContainerFromImage(spec, r.Rootfs, rootfs) || updated' "$service" &&
    ! (cd "$work" && go list -deps ./shim) | grep -qx 'gvisor.dev/gvisor/pkg/sentry/kernel' ||
    { rm -rf "$work"; echo "gvisor shim: a patch did not apply" >&2; return 1; }
  (cd "$work" && go test -count=1 ./pkg/shim/v1/runsc/ >&2) ||
    { rm -rf "$work"; echo "gvisor shim: the patch's tests failed" >&2; return 1; }
  (cd "$work" && go build -trimpath -ldflags "-s -w" -o "$out/containerd-shim-runsc-v1.partial" ./shim)
  mv "$out/containerd-shim-runsc-v1.partial" "$out/containerd-shim-runsc-v1"
  echo "$stamp" >"$out/containerd-shim-runsc-v1.patch"
  rm -rf "$work"
}

# gVisor's containerd shim as released, for the kind nodes (docs/kind.md): the same module
# version with only the one constant this kind of machine forces (docs/adr/0004), none of
# the memory patches above, and no config file of ours beside it. Its own directory, so
# the embedded node's patched shim beside runsc is never replaced by it. The stamp names
# this function, so a change to the patch rebuilds it.
build_stock_runsc_shim() {
  local out=$CACHE/gvisor-$GVISOR_VERSION/stock
  local stamp; stamp=$(declare -f build_stock_runsc_shim | sha256sum | cut -d' ' -f1)
  [[ -x $out/containerd-shim-runsc-v1 && $(cat "$out/containerd-shim-runsc-v1.patch" 2>/dev/null) == "$stamp" ]] &&
    { log "gvisor stock shim cached"; return; }
  log "building gvisor stock shim $GVISOR_VERSION"
  local src; src=$(GOFLAGS=-mod=mod go mod download -json "gvisor.dev/gvisor@$GVISOR_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  local work; work=$(mktemp -d)
  cp -r "$src/." "$work/"
  chmod -R u+w "$work"
  local manager=$work/pkg/shim/v1/manager.go
  [[ $(grep -c 'oomScoreMax = -999$' "$manager") == 1 ]] ||
    { rm -rf "$work"; echo "gvisor stock shim: the oomScoreMax line moved; update build.sh" >&2; return 1; }
  sed -i 's/oomScoreMax = -999$/oomScoreMax = 0/' "$manager"
  # That one line, and nothing else of gVisor's tree, differs from the module.
  [[ $(diff -rq "$src" "$work") == "Files $src/pkg/shim/v1/manager.go and $manager differ" &&
    $(grep -c 'oomScoreMax = 0$' "$manager") == 1 ]] ||
    { rm -rf "$work"; echo "gvisor stock shim: the patch did not apply as one line" >&2; return 1; }
  mkdir -p "$out"
  (cd "$work" && go build -trimpath -ldflags "-s -w" -o "$out/containerd-shim-runsc-v1.partial" ./shim)
  mv "$out/containerd-shim-runsc-v1.partial" "$out/containerd-shim-runsc-v1"
  echo "$stamp" >"$out/containerd-shim-runsc-v1.patch"
  rm -rf "$work"
}

# containerd 2, its runc shim and ctr, built inside the module itself with the build tags
# of its own Makefile (no btrfs, devmapper or zfs snapshotters: this node uses overlayfs).
build_containerd() {
  [[ $CONTAINERD_VERSION == v2.* ]] ||
    { echo "containerd $CONTAINERD_VERSION: the node's configuration is containerd 2's (version 3); pin a v2 release" >&2; return 1; }
  local out=$CACHE/containerd-$CONTAINERD_VERSION
  [[ -f $out/.done ]] && { log "containerd $CONTAINERD_VERSION cached"; return; }
  log "building containerd $CONTAINERD_VERSION"
  local src; src=$(go mod download -json "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "$out"; mkdir -p "$out"
  (cd "$src" && go build -trimpath -tags "no_btrfs no_devmapper no_zfs urfave_cli_no_docs" \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
    -o "$out/" ./cmd/containerd ./cmd/containerd-shim-runc-v2 ./cmd/ctr)
  touch "$out/.done"
}

target=${1:-all}
case $target in
  kubernetes) build_kubernetes ;;
  etcd) build_etcd ;;
  containerd) build_containerd ;;
  crictl) go_install crictl "$CRI_TOOLS_VERSION" sigs.k8s.io/cri-tools/cmd/crictl ;;
  kube-router) go_install kube-router "$KUBE_ROUTER_VERSION" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router ;;
  gvisor) go_install gvisor "$GVISOR_VERSION" gvisor.dev/gvisor/runsc; build_runsc_shim ;;
  gvisor-stock) go_install gvisor "$GVISOR_VERSION" gvisor.dev/gvisor/runsc; build_stock_runsc_shim ;;
  kubeadm) build_kubeadm ;;
  kind) go_install kind "$KIND_VERSION" "sigs.k8s.io/kind" ;;
  registry) CGO_ENABLED=0 go_install distribution "$DISTRIBUTION_VERSION" github.com/distribution/distribution/v3/cmd/registry ;;
  coredns) go_install coredns "$COREDNS_VERSION" github.com/coredns/coredns ;;
  kind-all) "$0" all; for t in kubeadm kind coredns gvisor-stock; do "$0" "$t"; done ;;
  all) for t in etcd containerd crictl kube-router registry kubernetes; do "$0" "$t"; done
       "$0" gvisor ;;
  *) echo "usage: $0 [kubernetes|etcd|containerd|crictl|kube-router|registry|gvisor|all|kubeadm|kind|coredns|gvisor-stock|kind-all]" >&2; exit 2 ;;
esac
