# shellcheck shell=bash disable=SC2034
# openblox.local/sandbox:<digest> — the reference sandbox image (see docs/image-contract.md):
# the Debian base (python3, tini, coreutils, procps, iproute2), the native exec supervisor
# at /usr/libexec/openblox/supervise, user sandbox 1000:1000 with
# home /workspace, mount points /workspace /tmp /run/openblox, hash-based .pyc files, no
# setuid bits, no docs.
IMAGE_NAME=openblox.local/sandbox
IMAGE_OCI_ARGS=(
  --user 1000:1000
  --workdir /workspace
  --entrypoint '["/usr/bin/tini", "--"]'
  --cmd '["sleep", "infinity"]'
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  --env HOME=/workspace
  --env LANG=C.UTF-8
  --env PYTHONDONTWRITEBYTECODE=1
  --label org.opencontainers.image.title=openblox-sandbox
  --label org.opencontainers.image.description="openblox reference sandbox image (Debian $DEBIAN_SUITE)"
)

# The exec supervisor's native `run` (see the source's header); the client falls back to
# its Python twin in images without it.
SUPERVISE_SOURCE=$IMAGES_DIR/../../operator/openblox/guest/supervise.c

image_key_inputs() {
  echo "base $(base_key)"
  hash_files "$SUPERVISE_SOURCE"
}

image_rootfs() {
  local root=$1
  base_rootfs "$root"
  # shellcheck disable=SC2046
  apt_install "$root" $(package_list "$IMAGES_DIR/sandbox/packages" | tr , ' ')
  add_user "$root" sandbox 1000 1000 /workspace /bin/bash
  compile_python "$root" 'usr/lib/python3*'
  strip_rootfs "$root"
  install -d -m 0755 -o 1000 -g 1000 "$root/workspace" "$root/run/openblox"
  install -d -m 1777 "$root/tmp"
  # Served from EROFS, a container reads the image's /etc/hosts, not the kubelet's
  # (docs/adr/0014): loopback names still resolve.
  printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
  chmod 0644 "$root/etc/hosts"
  install -d -m 0755 "$root/usr/libexec/openblox"
  gcc -O2 -static -Wall -Wextra -o "$root/usr/libexec/openblox/supervise" "$SUPERVISE_SOURCE"
  strip "$root/usr/libexec/openblox/supervise"
  chmod 0755 "$root/usr/libexec/openblox/supervise"
}
