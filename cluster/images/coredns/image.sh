# shellcheck shell=bash disable=SC2034
# openblox.local/coredns:$COREDNS_VERSION — kubeadm's cluster DNS for the kind node image (docs/kind.md): the binary
# cluster/build.sh made, as /usr/local/bin/coredns on PATH, and nothing else.
# shellcheck source-path=SCRIPTDIR source=../built.sh
source "$IMAGES_DIR/built.sh"
IMAGE_NAME=openblox.local/coredns
IMAGE_TAG=$COREDNS_VERSION
IMAGE_OCI_ARGS=(--env PATH=/usr/local/bin:/usr/bin:/bin --entrypoint '["/usr/local/bin/coredns"]')
IMAGE_BINARY=$BUILDS_DIR/coredns-$COREDNS_VERSION/coredns
image_key_inputs() { built_binary_key "$IMAGE_BINARY"; }
image_rootfs() { install_binary "$1" "$IMAGE_BINARY" coredns; }
