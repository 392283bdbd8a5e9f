# shellcheck shell=bash disable=SC2034
# openblox.local/node-agent:<digest> — openblox's node agent (node-agent/): one static Go
# binary and nothing else, no shell, no libc. It runs as root with no capability, to write
# the kubelet's seccomp directory and connect to containerd's NRI socket (ADR 0020).
IMAGE_NAME=openblox.local/node-agent
IMAGE_OCI_ARGS=(--entrypoint '["/openblox-node-agent"]' --user 0:0)

image_key_inputs() {
  need go
  local source=${REPO:-$IMAGES_DIR/../..}/node-agent
  echo "$(go version)"
  hash_files "$source"/go.mod "$source"/go.sum "$source"/*.go "$source"/sandbox-seccomp.json
}

image_rootfs() {
  local root=$1 source=${REPO:-$IMAGES_DIR/../..}/node-agent
  log "node-agent: go build (static)"
  (cd "$source" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w" -o "$root/openblox-node-agent" .)
  chmod 0755 "$root/openblox-node-agent"
}
