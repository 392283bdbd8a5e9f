"""Records how real tools fail in a root laid out like a code-exec sandbox's, for the
transcript corpus the denial classifier is measured on (docs/denials.md, "Accuracy").

    sudo .venv/bin/python -m tests.unit.denial_transcripts.capture [ID ...]

Needs root (for a private mount namespace), Linux and the tools the recipes run (bash,
dash, python3, gcc, git, sqlite3, perl, node/npm, go, a rustup toolchain). Nothing it
mounts is seen outside its namespace. Each recipe in recipes.yaml runs in a root of its
own: an overlay of this machine's root, made read-only (or, with `root: root-owned`, left
writable by root only, so uid 1000 gets EACCES, as gVisor answers for root-owned
directories), with tmpfs at /tmp, /workspace and /run/openblox, mounted noexec unless the
recipe says `noexec: false`. The command runs as uid 1000, HOME=/workspace, in
/workspace, as the sandbox runs it; its exit status, stdout and stderr are written to
transcripts.yaml. Recipes with `quoted:` carry text quoted from a tool's real output where
it cannot run here; they are copied as they are. IDs given run only those recipes and
keep the other transcripts.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import sysconfig
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
RECIPES = HERE / "recipes.yaml"
TRANSCRIPTS = HERE / "transcripts.yaml"
RUST_TOOLCHAIN = Path("/root/.rustup/toolchains/stable-x86_64-unknown-linux-gnu")
# The image's PATH, with the Go and Rust toolchains in front.
PATH = ":".join(
    [
        *("/usr/local/go/bin", "/opt/rust/bin"),
        *("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"),
    ]
)
TIMEOUT = 300
# Where a recipe's env says $SITE_PACKAGES: this venv's, for libraries the system Python
# lacks (matplotlib, from the bench extra).
SITE_PACKAGES = sysconfig.get_paths()["purelib"]
# The first line each prints is the version recorded with the transcripts.
VERSIONS = {
    "bash": ["bash", "--version"],
    "python3": ["/usr/bin/python3", "--version"],
    "pip": ["/usr/bin/python3", "-m", "pip", "--version"],
    "gcc": ["gcc", "--version"],
    "make": ["make", "--version"],
    "tar": ["tar", "--version"],
    "git": ["git", "--version"],
    "sqlite3": ["sqlite3", "--version"],
    "perl": ["perl", "-e", "print $^V"],
    "node": ["node", "--version"],
    "npm": ["npm", "--version"],
    "go": ["/usr/local/go/bin/go", "version"],
    "cargo": [str(RUST_TOOLCHAIN / "bin" / "cargo"), "--version"],
    "matplotlib": [sys.executable, "-c", "import matplotlib; print(matplotlib.__version__)"],
}
SETUP_FAILED = 99

# Runs in the new mount namespace: $1 is the scratch directory, the rest the command.
# `remount,bind,ro` sets the flag on this namespace's mount only, never the filesystem's.
NAMESPACE = r"""
set -eu
base=$1; shift
mount -t tmpfs tmpfs "$base"
mkdir -p "$base/upper" "$base/work" "$base/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$base/upper,workdir=$base/work" "$base/root"
r=$base/root
mkdir -p "$r/workspace" "$r/run/openblox" "$r/opt/rust"
for d in /proc /dev /sys; do mount --rbind "$d" "$r$d"; done
mount --bind -o ro "$OB_RUST" "$r/opt/rust"
flags=nosuid,nodev
[ "$OB_NOEXEC" = 1 ] && flags=$flags,noexec
mount -t tmpfs -o "$flags,size=512m,mode=1777" tmpfs "$r/tmp"
mount -t tmpfs -o "$flags,size=512m,uid=1000,gid=1000" tmpfs "$r/workspace"
mount -t tmpfs -o "$flags,size=8m,uid=1000,gid=1000" tmpfs "$r/run/openblox"
if ! chroot "$r" /bin/sh -c "$OB_SETUP_ROOT" >"$base/setup.log" 2>&1; then
    cat "$base/setup.log" >&2; echo "setup_root failed" >&2; exit 99
fi
[ "$OB_ROOT" = read-only ] && mount -o remount,bind,ro "$r"
user="/usr/bin/setpriv --reuid=1000 --regid=1000 --clear-groups --inh-caps=-all"
exec chroot "$r" /usr/bin/env -i $OB_ENV $user /bin/sh -c '
    cd "$1" || exit 99
    if ! /bin/sh -c "$2" >/run/openblox/.setup.log 2>&1; then
        cat /run/openblox/.setup.log >&2; echo "setup failed" >&2; exit 99
    fi
    rm -f /run/openblox/.setup.log
    shift 2
    exec "$@"' sh "$OB_CWD" "$OB_SETUP" "$@"
"""


def _environment(recipe: dict[str, Any]) -> dict[str, str]:
    env = {
        "PATH": PATH,
        "HOME": "/workspace",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "GOTOOLCHAIN": "local",
        "GOFLAGS": "-modcacherw",
        "RUSTUP_TOOLCHAIN": "stable",
    }
    for key, value in (recipe.get("env") or {}).items():
        env[key] = str(value).replace("$SITE_PACKAGES", SITE_PACKAGES)
    return env


def versions() -> dict[str, str]:
    found = {}
    for tool, command in VERSIONS.items():
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        found[tool] = (result.stdout.strip().splitlines() or ["?"])[0]
    return found


def run(recipe: dict[str, Any]) -> dict[str, Any]:
    env = _environment(recipe)
    cwd = recipe.get("cwd", "/workspace")
    control = {
        "OB_RUST": str(RUST_TOOLCHAIN),
        "OB_NOEXEC": "1" if recipe.get("noexec", True) else "0",
        "OB_ROOT": recipe.get("root", "read-only"),
        "OB_SETUP_ROOT": recipe.get("setup_root", "true"),
        "OB_ENV": " ".join(f"{key}={value}" for key, value in env.items()),
        "OB_CWD": cwd,
        "OB_SETUP": recipe.get("setup", "true"),
    }
    with tempfile.TemporaryDirectory(prefix="denial-capture.") as scratch:
        result = subprocess.run(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "/bin/bash",
                "-c",
                NAMESPACE,
                "namespace",
                scratch,
                *recipe["argv"],
            ],
            env={**os.environ, **control},
            capture_output=True,
            timeout=TIMEOUT,
            check=False,
        )
    stderr = result.stderr.decode("utf-8", "replace")
    if result.returncode == SETUP_FAILED and "setup" in stderr:
        raise SystemExit(f"{recipe['id']}: {stderr}")
    return {
        "exit_code": result.returncode,
        "stdout": result.stdout.decode("utf-8", "replace"),
        "stderr": stderr,
        "noexec": recipe.get("noexec", True),
        "cwd": cwd,
        "source": f"captured: root {recipe.get('root', 'read-only')}, uid 1000",
    }


def transcript(recipe: dict[str, Any], recorded: dict[str, Any]) -> dict[str, Any]:
    kept = ("id", "expect", "kind", "held_out", "tool", "why", "argv")
    return {**{key: recipe[key] for key in kept if key in recipe}, **recorded}


def quoted(recipe: dict[str, Any]) -> dict[str, Any]:
    text = recipe["quoted"]
    return {
        "exit_code": text.get("exit_code", 1),
        "stdout": text.get("stdout", ""),
        "stderr": text.get("stderr", ""),
        "noexec": recipe.get("noexec", True),
        "cwd": recipe.get("cwd", "/workspace"),
        "source": f"quoted: {text['source']}",
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks, so a transcript reads as the tool printed it."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def main(argv: list[str]) -> int:
    if os.geteuid() != 0:
        print("capture needs root: it makes a private mount namespace", file=sys.stderr)
        return 2
    recipes = yaml.safe_load(RECIPES.read_text())["entries"]
    wanted = set(argv)
    old: dict[str, dict[str, Any]] = {}
    if wanted and TRANSCRIPTS.exists():
        old = {entry["id"]: entry for entry in yaml.safe_load(TRANSCRIPTS.read_text())["entries"]}
    entries = []
    for recipe in recipes:
        if wanted and recipe["id"] not in wanted and recipe["id"] in old:
            entries.append(old[recipe["id"]])
            continue
        recorded = quoted(recipe) if "quoted" in recipe else run(recipe)
        entries.append(transcript(recipe, recorded))
        print(f"{recipe['id']}: exit {recorded['exit_code']}", file=sys.stderr)
    document = {
        "captured": {
            "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "kernel": f"Linux {platform.release()}",
            "how": "tests/unit/denial_transcripts/capture.py from recipes.yaml",
            "versions": versions(),
        },
        "entries": entries,
    }
    header = "# Generated by capture.py from recipes.yaml: edit the recipes, not this file.\n"
    TRANSCRIPTS.write_text(
        header + yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
