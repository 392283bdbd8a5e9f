# shellcheck shell=bash
# Helpers for the images made of what cluster/build.sh built (the kind node image's
# control plane and networking, docs/kind.md) rather than of Debian packages alone.
# Sourced by those images' image.sh; each hashes this file into its key.

BUILDS_DIR=${OPENBLOX_CACHE:-/var/cache/openblox}
# shellcheck source=../versions.env
source "$IMAGES_DIR/../versions.env"

# built_binary_key FILE... : key lines for built binaries (content hashes) and this file;
# fails, naming the command that builds them, when one is missing.
built_binary_key() {
  local f
  hash_files "$IMAGES_DIR/built.sh"
  for f in "$@"; do
    [[ -x $f ]] || die "not built yet: $f (run: cluster/build.sh kind-all)"
    printf '%s  %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "${f#"$BUILDS_DIR"/}"
  done
}

# install_binary ROOT FILE NAME : a built static binary as ROOT/usr/local/bin/NAME, plus
# what such a binary expects around it: /tmp and account files naming root and nobody.
install_binary() {
  local root=$1
  install -d -m 0755 "$root/usr/local/bin" "$root/etc"
  install -d -m 1777 "$root/tmp"
  [[ -f $root/etc/passwd ]] || {
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnobody:x:65534:\n' >"$root/etc/group"
  }
  install -m 0755 "$2" "$root/usr/local/bin/$3"
}
