# shellcheck shell=bash disable=SC2034
# openblox.local/kube-network:<digest> — pod networking for the kind node image
# (docs/kind.md): the Debian base + iptables, ipset, conntrack, iproute2, and the
# kube-proxy and kube-router that cluster/build.sh made. The node image tags it also as
# kubeadm's openblox.local/kube-proxy:$KUBERNETES_VERSION; kube-router's DaemonSet names it
# by that tag too.
# shellcheck source-path=SCRIPTDIR source=../built.sh
source "$IMAGES_DIR/built.sh"
IMAGE_NAME=openblox.local/kube-network
IMAGE_OCI_ARGS=(--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
KUBE_PROXY=$BUILDS_DIR/kubernetes-$KUBERNETES_VERSION/kube-proxy
KUBE_ROUTER=$BUILDS_DIR/kube-router-$KUBE_ROUTER_VERSION/kube-router

image_key_inputs() {
  echo "base $(base_key)"
  built_binary_key "$KUBE_PROXY" "$KUBE_ROUTER"
}

image_rootfs() {
  local root=$1
  base_rootfs "$root"
  # shellcheck disable=SC2046
  apt_install "$root" $(package_list "$IMAGES_DIR/kube-network/packages" | tr , ' ')
  strip_rootfs "$root"
  install_binary "$root" "$KUBE_PROXY" kube-proxy
  install_binary "$root" "$KUBE_ROUTER" kube-router
}
