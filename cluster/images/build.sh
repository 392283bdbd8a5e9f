#!/usr/bin/env bash
# Build container images locally, with no Docker and no registry, as OCI archives cached by
# a content hash of their inputs; optionally import them into containerd.
#
#   cluster/images/build.sh [--import SOCKET] IMAGE...      IMAGE: pause sandbox operator node-agent all
#
# For each IMAGE: prints its reference on stdout (one line each, in order), writes it to
# ${OPENBLOX_CACHE:-/var/cache/openblox}/images/IMAGE.ref, and keeps the archive there as
# IMAGE-KEY.tar, whose path it writes to IMAGE.archive (KEY: hash of the build scripts, the
# image's directory, and its other inputs; IMAGE-KEY.json holds the reference and manifest
# digest). A second run with the same inputs
# builds nothing. With --import, each image is imported into containerd's k8s.io namespace
# unless containerd already has that reference at that digest.
#
# Tags are content hashes (the manifest digest's first 12 hex digits) except pause, whose
# tag is fixed (3.10) because containerd's sandbox_image names it. There are no floating tags:
# scripts read the .ref files.
#
# Environment: OPENBLOX_CACHE (cache root), REPO (source tree for the operator image;
# default: the repository holding this script), OPENBLOX_DEBIAN_MIRROR,
# OPENBLOX_DEBIAN_SECURITY_MIRROR, PYTHON (python >= 3.11 for oci.py; default python3).
# Needs root, debootstrap, gcc with static glibc (libc6-dev), unshare, and ctr for --import.
set -euo pipefail

IMAGES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE_DIR=${OPENBLOX_CACHE:-/var/cache/openblox}/images
PYTHON=${PYTHON:-python3}
ALL_IMAGES=(pause sandbox operator node-agent)
KEEP=3 # archives kept per image (most recently used first)

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$IMAGES_DIR/lib.sh"
# shellcheck source-path=SCRIPTDIR source=base/base.sh
source "$IMAGES_DIR/base/base.sh"

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit "${1:-2}"
}

socket=
images=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --import) [[ $# -ge 2 ]] || usage; socket=$2; shift 2 ;;
    --import=*) socket=${1#--import=}; shift ;;
    -h | --help) usage 0 ;;
    all) images+=("${ALL_IMAGES[@]}"); shift ;;
    -*) usage ;;
    *) [[ -f $IMAGES_DIR/$1/image.sh ]] || die "unknown image '$1' (known: ${ALL_IMAGES[*]})"
      images+=("$1"); shift ;;
  esac
done
[[ ${#images[@]} -gt 0 ]] || usage
[[ $(id -u) -eq 0 ]] || die "must run as root (debootstrap, chroot, numeric ownership)"
[[ -z $socket ]] || need ctr

mkdir -p "$CACHE_DIR"
# One build at a time per cache: concurrent runs wait instead of racing on the same files.
exec {lock_fd}>"$CACHE_DIR/.lock"
flock "$lock_fd"
init_work_dir

# Defined by each IMAGE/image.sh (reset before sourcing the next one).
reset_image_definition() {
  IMAGE_NAME='' IMAGE_TAG=''
  IMAGE_OCI_ARGS=()
  image_key_inputs() { :; }
  image_rootfs() { log "error: image_rootfs not defined"; return 1; }
}

# image_key IMAGE : the cache key of IMAGE (hex), from everything that goes into it.
image_key() {
  local img=$1
  {
    echo "image v1 $img $(dpkg --print-architecture) $IMAGE_NAME ${IMAGE_TAG:-<digest>}"
    hash_files "$IMAGES_DIR/build.sh" "$IMAGES_DIR/lib.sh" "$IMAGES_DIR/oci.py"
    hash_dir "$IMAGES_DIR/$img"
    image_key_inputs
  } | sha256_of_stdin
}

# build_one IMAGE : make sure IMAGE's archive exists; set REF, DIGEST and ARCHIVE.
build_one() {
  local img=$1 key meta root start
  reset_image_definition
  # shellcheck source=/dev/null
  source "$IMAGES_DIR/$img/image.sh"
  key=$(image_key "$img" | cut -c1-16)
  ARCHIVE=$CACHE_DIR/$img-$key.tar
  meta=$CACHE_DIR/$img-$key.json
  if [[ -f $ARCHIVE && -f $meta ]]; then
    log "$img: cached ($img-$key)"
    touch "$ARCHIVE" "$meta"
  else
    start=$SECONDS
    log "$img: building ($img-$key)"
    root=$WORK_DIR/$img/rootfs
    mkdir -p "$root"
    image_rootfs "$root"
    local -a which
    if [[ -n $IMAGE_TAG ]]; then which=(--ref "$IMAGE_NAME:$IMAGE_TAG"); else which=(--name "$IMAGE_NAME"); fi
    log "$img: writing OCI archive"
    "$PYTHON" "$IMAGES_DIR/oci.py" build "$root" -o "$ARCHIVE" "${which[@]}" \
      "${IMAGE_OCI_ARGS[@]}" --label "sh.openblox.image.key=$key" \
      --metadata "$meta.partial" >/dev/null
    mv "$meta.partial" "$meta"
    remove_tree "$WORK_DIR/$img"
    log "$img: built in $((SECONDS - start))s, archive $(du -h "$ARCHIVE" | cut -f1)"
    prune "$CACHE_DIR/$img-*.tar" "$KEEP"
    prune "$CACHE_DIR/$img-*.json" "$KEEP"
  fi
  read -r REF DIGEST < <("$PYTHON" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["ref"], d["digest"])' "$meta")
  printf '%s\n' "$REF" >"$CACHE_DIR/$img.ref.partial"
  mv "$CACHE_DIR/$img.ref.partial" "$CACHE_DIR/$img.ref"
  printf '%s\n' "$ARCHIVE" >"$CACHE_DIR/$img.archive.partial"
  mv "$CACHE_DIR/$img.archive.partial" "$CACHE_DIR/$img.archive"
}

for img in "${images[@]}"; do
  build_one "$img"
  [[ -z $socket ]] || import_archive "$socket" "$ARCHIVE" "$REF" "$DIGEST"
  printf '%s\n' "$REF"
done
