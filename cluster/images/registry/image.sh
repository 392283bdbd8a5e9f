# shellcheck shell=bash disable=SC2034
# openblox.local/registry:$DISTRIBUTION_VERSION — CNCF distribution's registry for the kind
# cluster's nodes to pull openblox's images from (docs/kind.md, docs/adr/0021): the binary
# cluster/build.sh made and its configuration, nothing else. Storage is a volume at
# /var/lib/registry; it listens on :5000 over plain HTTP, inside kind's network only.
# shellcheck source-path=SCRIPTDIR source=../built.sh
source "$IMAGES_DIR/built.sh"
IMAGE_NAME=openblox.local/registry
IMAGE_TAG=$DISTRIBUTION_VERSION
IMAGE_OCI_ARGS=(--env PATH=/usr/local/bin:/usr/bin:/bin
  --entrypoint '["/usr/local/bin/registry", "serve", "/etc/distribution/config.yml"]')
IMAGE_BINARY=$BUILDS_DIR/distribution-$DISTRIBUTION_VERSION/registry
image_key_inputs() { built_binary_key "$IMAGE_BINARY"; }
image_rootfs() {
  install_binary "$1" "$IMAGE_BINARY" registry
  install -D -m 0644 /dev/stdin "$1/etc/distribution/config.yml" <<'YAML'
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: /var/lib/registry
  delete:
    enabled: true
http:
  addr: :5000
YAML
}
