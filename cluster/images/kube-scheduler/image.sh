# shellcheck shell=bash disable=SC2034
# openblox.local/kube-scheduler:$KUBERNETES_VERSION — kubeadm's scheduler for the kind node image (docs/kind.md): the binary
# cluster/build.sh made, as /usr/local/bin/kube-scheduler on PATH, and nothing else.
# shellcheck source-path=SCRIPTDIR source=../built.sh
source "$IMAGES_DIR/built.sh"
IMAGE_NAME=openblox.local/kube-scheduler
IMAGE_TAG=$KUBERNETES_VERSION
IMAGE_OCI_ARGS=(--env PATH=/usr/local/bin:/usr/bin:/bin)
IMAGE_BINARY=$BUILDS_DIR/kubernetes-$KUBERNETES_VERSION/kube-scheduler
image_key_inputs() { built_binary_key "$IMAGE_BINARY"; }
image_rootfs() { install_binary "$1" "$IMAGE_BINARY" kube-scheduler; }
