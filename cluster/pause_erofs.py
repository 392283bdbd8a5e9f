#!/usr/bin/env python3
"""The node's EROFS image of the pause rootfs, which gVisor's shim serves a pod's pause
container from, so that container has no gofer (docs/adr/0013).

    pause_erofs.py ARCHIVE DIR

ARCHIVE is the pause image's OCI archive (cluster/images/build.sh). DIR gets two files:
``pause.erofs``, the image's layer with the mount points the pause container's spec needs
(/dev, /proc, /sys, /tmp), and ``pause.erofs.files``, the listing of the layer's files that
the shim compares with the container's own rootfs before it uses the image
(cluster/gvisor-shim/pkg/shim/v1/runsc/pause_rootfs.go writes the same listing). Both are
built afresh (a few milliseconds: the layer is one static binary) and byte for byte the
same each time, and each replaces the one in DIR by an atomic rename when it differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import IO

IMAGE_NAME = "pause.erofs"
LISTING_NAME = "pause.erofs.files"
# The mount points of the pause container's spec that are not under /dev (a tmpfs), and
# /tmp, which runsc mounts when a spec has none: a read-only image cannot grow them.
MOUNT_POINTS = {"dev": 0o755, "proc": 0o555, "sys": 0o555, "tmp": 0o1777}
# A fixed UUID and timestamp, so the same layer gives the same image.
UUID = "6f70656e-626c-6f78-7061-757365000001"
# gVisor's EROFS reader needs file data out of line (mkfs.erofs inlines tails by default).
MKFS = ("mkfs.erofs", "-E", "noinline_data", "-T", "0", "-U", UUID)


def describe_rootfs(root: Path) -> str:
    """Regular files and symbolic links under root, one a line, sorted:
    ``PATH file MODE UID GID SHA256`` or ``PATH link TARGET``. Directories are left out."""
    lines = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            rel = "/" + path.relative_to(root).as_posix()
            if any(c in rel for c in " \t\n"):
                raise ValueError(f"path {rel!r} has white space")
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode):
                continue
            if stat.S_ISLNK(info.st_mode):
                lines.append(f"{rel} link {path.readlink()}")
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                mode = stat.S_IMODE(info.st_mode)
                lines.append(f"{rel} file {mode:04o} {info.st_uid} {info.st_gid} {digest}")
            else:
                raise ValueError(f"{rel} is not a file, link or directory")
    if not lines:
        raise ValueError(f"{root} has no files")
    return "".join(f"{line}\n" for line in sorted(lines))


def unpack_layer(archive: Path, into: Path) -> None:
    """The image's one layer as containerd unpacks it: numeric owners and modes kept."""
    with tarfile.open(archive) as outer:
        index = json.load(member_of(outer, "index.json"))
        manifest = json.load(member_of(outer, blob_path(index["manifests"][0]["digest"])))
        layers = manifest["layers"]
        if len(layers) != 1:
            raise ValueError(f"{archive}: expected one layer, found {len(layers)}")
        with tarfile.open(fileobj=member_of(outer, blob_path(layers[0]["digest"]))) as layer:
            members = layer.getmembers()
            for member in members:
                _check(archive, member)
            # Every entry was checked above; the filter argument is only where tarfile has it.
            if hasattr(tarfile, "fully_trusted_filter"):
                layer.extractall(into, numeric_owner=True, filter="fully_trusted")
            else:  # pragma: no cover - Python without the extraction filters
                layer.extractall(into, numeric_owner=True)


def _check(archive: Path, member: tarfile.TarInfo) -> None:
    path = Path(member.name)
    if member.name.startswith("/") or ".." in path.parts or path.name.startswith(".wh."):
        raise ValueError(f"{archive}: layer entry {member.name!r} is not a plain path")
    if not (member.isfile() or member.isdir() or member.issym()):
        raise ValueError(f"{archive}: layer entry {member.name!r} is a device, FIFO or hard link")


def build(archive: Path, dest: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="pause-erofs-") as work:
        root = Path(work, "rootfs")
        root.mkdir()
        unpack_layer(archive, root)
        listing = Path(work, LISTING_NAME)
        listing.write_text(describe_rootfs(root))
        for name, mode in MOUNT_POINTS.items():
            if not (root / name).exists():
                (root / name).mkdir()
                (root / name).chmod(mode)
        image = Path(work, IMAGE_NAME)
        subprocess.run([*MKFS, "--quiet", str(image), str(root)], check=True)
        dest.mkdir(parents=True, exist_ok=True)
        # The listing first: the shim uses the image only when the listing matches.
        install(listing, dest / LISTING_NAME)
        install(image, dest / IMAGE_NAME)


def install(source: Path, dest: Path) -> None:
    if dest.is_file() and dest.read_bytes() == source.read_bytes():
        return
    partial = dest.with_name(dest.name + ".partial")
    shutil.copyfile(source, partial)
    partial.chmod(0o644)
    partial.replace(dest)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    if shutil.which(MKFS[0]) is None:
        print(f"pause_erofs: {MKFS[0]} not found (Debian package erofs-utils)", file=sys.stderr)
        return 1
    build(Path(argv[0]), Path(argv[1]))
    return 0


def blob_path(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"blobs/{algorithm}/{hexdigest}"


def member_of(archive: tarfile.TarFile, name: str) -> IO[bytes]:
    found = archive.extractfile(name)
    if found is None:
        raise ValueError(f"{archive.name!r} has no file {name}")
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
