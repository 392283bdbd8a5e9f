# shellcheck shell=bash
# The Debian base root filesystem shared by the debootstrap-based images: debootstrap
# --variant=minbase with base/packages, then every bookworm-updates and bookworm-security
# update. Cached as a tarball keyed by this file, the package list, suite, mirrors and
# architecture; a cached base never changes, so bump base/packages to pick up updates.
# Sourced by build.sh after lib.sh.

DEBIAN_SUITE=bookworm
DEBIAN_MIRROR=${OPENBLOX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SECURITY_MIRROR=${OPENBLOX_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

base_key() {
  {
    echo "base v1 $DEBIAN_SUITE $DEBIAN_MIRROR $DEBIAN_SECURITY_MIRROR $(dpkg --print-architecture)"
    hash_dir "$IMAGES_DIR/base"
  } | sha256_of_stdin
}

_base_debootstrap() {
  local root=$1 pkgs logf=$WORK_DIR/debootstrap.log
  need debootstrap unshare chroot
  local -a keyring=()
  pkgs=$(package_list "$IMAGES_DIR/base/packages")
  [[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]] &&
    keyring=(--keyring=/usr/share/keyrings/debian-archive-keyring.gpg)
  log "debootstrap $DEBIAN_SUITE minbase + $pkgs (first time: a few minutes)"
  # In a private mount namespace: the /proc and /sys that debootstrap mounts in the target
  # disappear with it, even if it is killed.
  if ! unshare --mount --propagation private -- debootstrap --variant=minbase \
      --include="$pkgs" --arch="$(dpkg --print-architecture)" "${keyring[@]}" \
      "$DEBIAN_SUITE" "$root" "$DEBIAN_MIRROR" >"$logf" 2>&1; then
    tail -n 30 "$logf" >&2
    [[ -f $root/debootstrap/debootstrap.log ]] && tail -n 30 "$root/debootstrap/debootstrap.log" >&2
    die "debootstrap failed"
  fi
  cat >"$root/etc/apt/sources.list" <<SOURCES
deb $DEBIAN_MIRROR $DEBIAN_SUITE main
deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main
deb $DEBIAN_SECURITY_MIRROR $DEBIAN_SUITE-security main
SOURCES
  log "applying $DEBIAN_SUITE-updates and -security"
  chroot_logged "$root" apt-upgrade '
    apt-get -q update
    apt-get -q -y -o Dpkg::Options::=--force-confold upgrade
    apt-get clean
  '
  strip_rootfs "$root"
}

# base_rootfs ROOT : populate ROOT with the base (from the cache, or built and cached).
base_rootfs() {
  cached_tarball "$CACHE_DIR/base/$DEBIAN_SUITE-$(base_key | cut -c1-16).tar" _base_debootstrap "$1"
}
