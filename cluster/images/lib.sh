# shellcheck shell=bash
# Shared helpers for cluster/images/build.sh and the image scripts it sources.
# Expects: IMAGES_DIR (this directory), CACHE_DIR (${OPENBLOX_CACHE}/images).

log() { printf '[images %3ds] %s\n' "$SECONDS" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# need COMMAND... : fail early, naming the Debian package, when a tool is missing.
need() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null && continue
    case $c in
      gcc) die "gcc not found (apt-get install gcc libc6-dev)" ;;
      ctr) die "ctr not found (apt-get install containerd)" ;;
      unshare) die "unshare not found (apt-get install util-linux)" ;;
      *) die "$c not found (apt-get install $c)" ;;
    esac
  done
}

sha256_of_stdin() { sha256sum | cut -d' ' -f1; }

# hash_files FILE... : one line "sha256  path" per file, in the order given, each path
# relative to this directory or else to the repository (cluster/kind/...), never absolute:
# a key must not change with where the checkout is, or a fresh clone rebuilds everything.
hash_files() {
  local f name
  for f in "$@"; do
    [[ -f $f ]] || die "missing input $f"
    name=${f#"$IMAGES_DIR"/}
    [[ $name != "$f" ]] || name=${f#"${IMAGES_DIR%/cluster/images}"/}
    printf '%s  %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "$name"
  done
}

# hash_dir DIR : content hash lines of every regular file under DIR, sorted by path.
hash_dir() {
  local dir=$1 f
  while IFS= read -r -d '' f; do
    hash_files "$f"
  done < <(find "$dir" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z)
}

# package_list FILE... : the packages named in FILEs (comments and blank lines dropped),
# sorted, unique, comma-separated.
package_list() {
  sed -e 's/#.*//' "$@" | tr -s '[:space:]' '\n' | sed '/^$/d' | LC_ALL=C sort -u | paste -sd, -
}

# unmount_under DIR : unmount everything mounted at or below DIR, deepest first.
unmount_under() {
  local dir mp
  dir=$(realpath -m "$1")
  # Field 5 of mountinfo is the mount point (octal escapes for spaces are not expected here).
  awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo |
    sort -r | while IFS= read -r mp; do
      umount "$mp" 2>/dev/null || umount -l "$mp" || log "warning: could not unmount $mp"
    done
}

# remove_tree DIR : unmount anything left below DIR, then delete it without ever crossing
# into another filesystem (a bind mount of /dev must never be deleted through).
remove_tree() {
  local dir=$1
  [[ -n $dir && -e $dir ]] || return 0
  unmount_under "$dir"
  rm -rf --one-file-system -- "$dir"
}

# init_work_dir : create WORK_DIR under the cache (same filesystem as the results, so
# finished files are renamed into place) and remove it, unmounting anything left below it,
# when this shell exits for any reason. Call it in the main shell, not in a subshell, and
# with the cache lock held: any other work directory then belongs to a run that was killed
# (SIGKILL runs no trap) and is removed, mounts first.
WORK_DIR=
_cleanup_work_dir() { [[ -z $WORK_DIR ]] || remove_tree "$WORK_DIR"; }
init_work_dir() {
  local stale
  mkdir -p "$CACHE_DIR/work"
  for stale in "$CACHE_DIR"/work/build.*; do
    [[ -d $stale ]] || continue
    log "removing $stale, left by a build that was killed"
    remove_tree "$stale"
  done
  WORK_DIR=$(mktemp -d "$CACHE_DIR/work/build.XXXXXX")
  trap _cleanup_work_dir EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# run_in_chroot ROOT [VAR=VALUE...] -- CMD... : run CMD inside ROOT with /proc, /sys and /dev
# mounted, a clean environment plus the VAR=VALUEs, and the host's DNS configuration.
# Everything is mounted inside a private mount namespace (unshare), so the mounts vanish
# with the command however it ends, even on SIGKILL; the EXIT trap's unmount_under is only
# a second line of defence. Optional: CHROOT_BINDS="HOSTDIR:DIR_IN_ROOT ..." bind mounts.
run_in_chroot() {
  local root=$1; shift
  local -a envs=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  [[ ${1:-} == -- ]] && shift
  [[ -x $root/bin/sh ]] || die "$root: not a root filesystem"
  # shellcheck disable=SC2016
  unshare --mount --propagation private -- /bin/bash -euc '
    root=$1; binds=$2; shift 2
    mount -t proc proc "$root/proc"
    mount -t sysfs -o ro sysfs "$root/sys"
    mount --rbind /dev "$root/dev"
    if [[ -e /etc/resolv.conf ]]; then
      touch "$root/etc/resolv.conf"
      mount --bind -o ro "$(realpath /etc/resolv.conf)" "$root/etc/resolv.conf"
    fi
    for b in $binds; do
      mkdir -p "$root/${b#*:}"
      mount --bind "${b%%:*}" "$root/${b#*:}"
    done
    exec chroot "$root" "$@"
  ' run_in_chroot "$root" "${CHROOT_BINDS:-}" /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "${envs[@]}" "$@"
}

# chroot_logged ROOT WHAT SCRIPT [ARG...] : run the sh SCRIPT in ROOT (see run_in_chroot)
# with its output in a log file that is shown only if it fails.
chroot_logged() {
  local root=$1 what=$2 script=$3; shift 3
  local logf=$WORK_DIR/$what.log
  if ! run_in_chroot "$root" -- /bin/sh -ec "$script" "$what" "$@" >"$logf" 2>&1; then
    tail -n 40 "$logf" >&2
    die "$what failed (in chroot)"
  fi
}

# apt_install ROOT PACKAGE... : install packages (no recommends) from the root's sources,
# leaving no package lists or downloaded .debs behind.
apt_install() {
  local root=$1; shift
  [[ $# -gt 0 ]] || return 0
  log "apt-get install $*"
  chroot_logged "$root" apt-install '
    apt-get -q update
    apt-get -q -y --no-install-recommends install "$@"
    apt-get clean
    rm -rf /var/lib/apt/lists/*
  ' "$@"
}

# add_user ROOT NAME UID GID HOME SHELL : append a user and its group to the root's
# account files directly (deterministic, no chroot, no lastlog/faillog side effects).
add_user() {
  local root=$1 name=$2 uid=$3 gid=$4 home=$5 shell=$6
  grep -q "^$name:" "$root/etc/passwd" && die "user $name already exists"
  awk -F: -v u="$uid" '$3 == u { exit 1 }' "$root/etc/passwd" || die "uid $uid is taken"
  printf '%s:x:%s:%s:%s:%s:%s\n' "$name" "$uid" "$gid" "$name" "$home" "$shell" >>"$root/etc/passwd"
  printf '%s:!::0:99999:7:::\n' "$name" >>"$root/etc/shadow"
  printf '%s:x:%s:\n' "$name" "$gid" >>"$root/etc/group"
  printf '%s:!::\n' "$name" >>"$root/etc/gshadow"
}

# compile_python ROOT GLOB... : (re)compile the .py files under the directories matching
# GLOBs (relative to ROOT) to unchecked-hash .pyc files, with the root's own python3. The
# layer's fixed mtimes would make timestamp-based .pyc files stale, and a read-only root
# cannot rewrite them, so Python would recompile every module it imports on every start.
# Hash-based .pyc files do not depend on mtimes.
compile_python() {
  local root=$1 pat d; shift
  local -a dirs=()
  for pat in "$@"; do
    while IFS= read -r d; do dirs+=("/${d#"$root"/}"); done < <(compgen -G "$root/$pat")
  done
  run_in_chroot "$root" -- /usr/bin/python3 -m compileall -q -f -j 1 \
    --invalidation-mode unchecked-hash "${dirs[@]}" >/dev/null
}

# strip_rootfs ROOT : drop what a runtime image does not need and what would make it differ
# from build to build: documentation (copyright files kept), man pages, locales, apt lists
# and caches, logs, build-host identity, device nodes and setuid/setgid bits.
strip_rootfs() {
  local root=$1
  find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete 2>/dev/null || true
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
  rm -rf "$root"/usr/share/{man,info,locale,lintian,linda,bug,doc-base}/* \
    "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
    "$root"/var/lib/dpkg/*-old "$root"/var/cache/ldconfig/aux-cache \
    "$root"/var/log/* "$root"/tmp/* "$root"/var/tmp/* "$root"/root/.cache \
    "${root:?}"/dev/* "${root:?}"/run/*
  mkdir -p "$root/var/lib/apt/lists/partial" "$root/var/cache/apt/archives/partial"
  : >"$root/etc/resolv.conf"
  : >"$root/etc/hostname"
  rm -f "$root/etc/machine-id"
  find "$root" -xdev -type f -perm /6000 -exec chmod ug-s {} +
}

# cached_tarball FILE FUNCTION ROOT : if FILE exists unpack it into ROOT, else run
# FUNCTION ROOT to populate ROOT and save it as FILE (atomically). FILE is NAME-KEY.tar;
# only the two most recently used NAME-*.tar are kept.
cached_tarball() {
  local file=$1 fn=$2 root=$3
  mkdir -p "$root"
  if [[ -f $file ]]; then
    log "reusing $(basename "$file")"
    touch "$file"
    tar -C "$root" --numeric-owner -xpf "$file"
    return
  fi
  "$fn" "$root"
  mkdir -p "$(dirname "$file")"
  tar -C "$root" --numeric-owner --one-file-system -cpf "$file.partial" .
  mv "$file.partial" "$file"
  prune "${file%-*}-*.tar" 2
}

# prune DIR/GLOB KEEP : keep only the KEEP most recently used files matching GLOB in DIR.
prune() {
  local dir=${1%/*} glob=${1##*/} keep=$2
  find "$dir" -maxdepth 1 -type f -name "$glob" -printf '%T@\t%p\n' 2>/dev/null | sort -rn |
    tail -n +"$((keep + 1))" | cut -f2- | while IFS= read -r f; do
    log "pruning old $(basename "$f")"
    rm -f -- "$f"
  done
}

# containerd_digest SOCKET REF : the manifest digest containerd (namespace k8s.io) has for
# REF, or nothing.
containerd_digest() {
  ctr --address "$1" -n k8s.io images ls "name==$2" 2>/dev/null | awk 'NR > 1 { print $3 }'
}

# import_archive SOCKET ARCHIVE REF DIGEST : import unless containerd has REF at DIGEST.
import_archive() {
  local sock=$1 archive=$2 ref=$3 digest=$4 have
  [[ -S $sock ]] || die "$sock: no containerd socket"
  have=$(containerd_digest "$sock" "$ref")
  if [[ $have == "$digest" ]]; then
    log "$ref already in containerd ($digest)"
    return
  fi
  log "importing $ref into containerd (k8s.io)"
  ctr --address "$sock" -n k8s.io images import --all-platforms "$archive" >/dev/null
  have=$(containerd_digest "$sock" "$ref")
  [[ $have == "$digest" ]] || die "$ref: containerd has '${have:-nothing}', expected $digest"
}
