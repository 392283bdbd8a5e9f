# shellcheck shell=bash disable=SC2034
# openblox.local/operator:<digest> — the operator: the Debian base + python3-venv, a venv at
# /opt/openblox with the project (REPO: pyproject.toml + operator/) installed, run as
# 1000:1000 with entrypoint `/opt/openblox/bin/python -m openblox.controller` (the build
# never imports it). The final venv has no pip or setuptools.
#
# Two cache levels: the venv with the project's dependencies (and build requirements) is
# cached as a tarball keyed by the base, this file, operator/packages and pyproject.toml, so a
# change to the operator's source only reinstalls the project itself (--no-deps, offline).
IMAGE_NAME=openblox.local/operator
IMAGE_OCI_ARGS=(
  --user 1000:1000
  --workdir /
  --entrypoint '["/opt/openblox/bin/python", "-m", "openblox.controller"]'
  --env PATH=/opt/openblox/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  --env HOME=/tmp
  --env LANG=C.UTF-8
  --env PYTHONDONTWRITEBYTECODE=1
  --env PYTHONUNBUFFERED=1
  --label org.opencontainers.image.title=openblox-operator
)
REPO=$(cd "${REPO:-$IMAGES_DIR/../..}" && pwd)
[[ -f $REPO/pyproject.toml ]] || die "REPO=$REPO has no pyproject.toml"

# The project files that go into the image, relative to REPO, NUL-separated, sorted: what
# git would commit (tracked or untracked, not ignored), or without git everything but
# caches and build output.
_operator_sources() {
  {
    if git -C "$REPO" rev-parse --show-toplevel >/dev/null 2>&1 &&
        [[ $(git -C "$REPO" rev-parse --show-toplevel) == "$REPO" ]]; then
      git -C "$REPO" ls-files -z -c -o --exclude-standard -- pyproject.toml operator \
        'README*' 'LICENSE*' 'NOTICE*'
    else
      (
        cd "$REPO" || exit 1
        top=(pyproject.toml)
        for g in operator README* LICENSE* NOTICE*; do [[ -e $g ]] && top+=("$g"); done
        find "${top[@]}" \( -name __pycache__ -o -name '*.egg-info' -o -name build \
          -o -name '.*_cache' \) -prune -o -type f -print0
      )
    fi
  } | (cd "$REPO" && while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\0' "$f"; done) |
    LC_ALL=C sort -zu
}

# The requirements to preinstall: the build system's, the project's dependencies and its
# `operator` extra (what `pip install 'openblox[operator]'` brings: kopf, prometheus-client).
_operator_requirements() {
  "$PYTHON" - "$REPO/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    doc = tomllib.load(f)
project = doc.get("project", {})
for req in (
    doc.get("build-system", {}).get("requires", [])
    + project.get("dependencies", [])
    + project.get("optional-dependencies", {}).get("operator", [])
):
    print(req)
PY
}

_operator_deps_key() {
  {
    echo "operator-deps v1 base $(base_key)"
    hash_files "$IMAGES_DIR/operator/image.sh" "$IMAGES_DIR/operator/packages"
    _operator_requirements
  } | sha256_of_stdin
}

image_key_inputs() {
  echo "deps $(_operator_deps_key)"
  local f
  while IFS= read -r -d '' f; do
    printf '%s  %s\n' "$(sha256sum <"$REPO/$f" | cut -d' ' -f1)" "$f"
  done < <(_operator_sources)
}

# Pip inside the chroot: the host's index settings, proxy and CA bundle pass through; a pip
# download cache in the build cache makes rebuilds fast.
_pip_in_chroot() {
  local root=$1; shift
  local -a envs=(PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
    "PIP_DEFAULT_TIMEOUT=${PIP_DEFAULT_TIMEOUT:-120}")
  local v
  for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST HTTP_PROXY HTTPS_PROXY NO_PROXY \
      http_proxy https_proxy no_proxy; do
    [[ -z ${!v:-} ]] || envs+=("$v=${!v}")
  done
  local ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
  if [[ -f $ca ]]; then
    mkdir -p "$root/tmp/openblox-build"
    cp "$ca" "$root/tmp/openblox-build/ca.crt"
    envs+=(PIP_CERT=/tmp/openblox-build/ca.crt)
  fi
  mkdir -p "$CACHE_DIR/pip-cache"
  CHROOT_BINDS="$CACHE_DIR/pip-cache:/root/.cache/pip" run_in_chroot "$root" "${envs[@]}" -- "$@"
}

_operator_deps() {
  local root=$1
  base_rootfs "$root"
  # shellcheck disable=SC2046
  apt_install "$root" $(package_list "$IMAGES_DIR/operator/packages" | tr , ' ')
  local -a reqs
  mapfile -t reqs < <(_operator_requirements)
  log "operator: venv + ${#reqs[@]} requirements from pyproject.toml"
  run_in_chroot "$root" -- /usr/bin/python3 -m venv /opt/openblox
  _pip_in_chroot "$root" /opt/openblox/bin/pip install -q "${reqs[@]}"
  rm -rf "$root/tmp/openblox-build"
  log "operator: compiling the standard library and the dependencies"
  compile_python "$root" 'usr/lib/python3*' 'opt/openblox/lib/python3*'
}

image_rootfs() {
  local root=$1
  cached_tarball "$CACHE_DIR/stage/operator-deps-$(_operator_deps_key | cut -c1-16).tar" \
    _operator_deps "$root"
  log "operator: installing the project from $REPO"
  mkdir -p "$root/tmp/openblox-src"
  (cd "$REPO" && _operator_sources | tar --null -T - -cf -) | tar -C "$root/tmp/openblox-src" -xf -
  run_in_chroot "$root" -- /opt/openblox/bin/pip install -q --no-deps --no-build-isolation \
    --no-index --no-compile /tmp/openblox-src
  # Then drop pip and setuptools (nothing may need them at run time: pip check proves it
  # for setuptools before pip itself goes).
  chroot_logged "$root" pip-cleanup '
    /opt/openblox/bin/pip uninstall -q -y setuptools
    /opt/openblox/bin/pip check
    /opt/openblox/bin/python -m pip uninstall -q -y pip
  '
  rm -rf "$root/tmp/openblox-src"
  add_user "$root" openblox 1000 1000 /nonexistent /usr/sbin/nologin
  # Only the project: the standard library and the dependencies were compiled in the stage.
  compile_python "$root" 'opt/openblox/lib/python3*/site-packages/openblox'
  strip_rootfs "$root"
  install -d -m 1777 "$root/tmp"
}
