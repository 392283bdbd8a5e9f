# shellcheck shell=bash disable=SC2034
# openblox.local/pause:3.10 — the pod sandbox ("infra") image containerd's sandbox_image
# names: a single static binary built from pause.c, nothing else, run as 65535:65535.
IMAGE_NAME=openblox.local/pause
IMAGE_TAG=3.10
IMAGE_OCI_ARGS=(--entrypoint '["/pause"]' --user 65535:65535)

image_key_inputs() {
  need gcc
  echo "gcc $(gcc -dumpfullversion) $(gcc -dumpmachine)"
  echo "libc6-dev $(dpkg-query -W -f '${Version}' libc6-dev 2>/dev/null || echo none)"
}

image_rootfs() {
  local root=$1
  log "pause: gcc -static"
  gcc -static -Os -s -Wall -Wextra -Werror -o "$root/pause" "$IMAGES_DIR/pause/pause.c"
  chmod 0755 "$root/pause"
  "$root/pause" --version >/dev/null || die "pause binary does not run"
}
