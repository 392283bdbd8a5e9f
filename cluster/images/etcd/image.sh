# shellcheck shell=bash disable=SC2034
# openblox.local/etcd:$ETCD_VERSION — kubeadm's etcd for the kind node image (docs/kind.md): the binary
# cluster/build.sh made, as /usr/local/bin/etcd on PATH, and nothing else.
# shellcheck source-path=SCRIPTDIR source=../built.sh
source "$IMAGES_DIR/built.sh"
IMAGE_NAME=openblox.local/etcd
IMAGE_TAG=$ETCD_VERSION
IMAGE_OCI_ARGS=(--env PATH=/usr/local/bin:/usr/bin:/bin)
IMAGE_BINARY=$BUILDS_DIR/etcd-$ETCD_VERSION/server
image_key_inputs() { built_binary_key "$IMAGE_BINARY"; }
image_rootfs() { install_binary "$1" "$IMAGE_BINARY" etcd; }
