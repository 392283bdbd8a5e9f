# shellcheck shell=bash disable=SC2034
# openblox.local/kube-apiserver:$KUBERNETES_VERSION — kubeadm's API server for the kind node image (docs/kind.md): the binary
# cluster/build.sh made, as /usr/local/bin/kube-apiserver on PATH, and nothing else.
# shellcheck source-path=SCRIPTDIR source=../built.sh
source "$IMAGES_DIR/built.sh"
IMAGE_NAME=openblox.local/kube-apiserver
IMAGE_TAG=$KUBERNETES_VERSION
IMAGE_OCI_ARGS=(--env PATH=/usr/local/bin:/usr/bin:/bin)
IMAGE_BINARY=$BUILDS_DIR/kubernetes-$KUBERNETES_VERSION/kube-apiserver
image_key_inputs() { built_binary_key "$IMAGE_BINARY"; }
image_rootfs() { install_binary "$1" "$IMAGE_BINARY" kube-apiserver; }
