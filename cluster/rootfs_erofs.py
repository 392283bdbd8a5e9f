#!/usr/bin/env python3
"""EROFS images of container images as containerd unpacked them on this node, which
gVisor's shim serves those containers' rootfs from, so they have no gofer (docs/adr/0014).

    rootfs_erofs.py --ctr CTR --address SOCKET IMAGES_DIR INDEX ARCHIVE...

For each ARCHIVE (an OCI archive of cluster/images/build.sh, of one layer, already
imported into containerd's k8s.io namespace), the image's snapshot is found through a
read-only view, and ``IMAGES_DIR/<chain id>.erofs`` is made from that snapshot's
directory: the very files a container of the image would see. INDEX gets one line per
image, the snapshot directory, a tab and the image's path; the shim serves a container
from an image only when its rootfs is that snapshot and nothing was written over it.
INDEX names only the ARCHIVEs given, and is replaced by an atomic rename; an image made
before for the same snapshot is kept, and the others are deleted (a running sandbox
keeps the image it has open; a new container of an image left out keeps its gofer).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from pause_erofs import MKFS, blob_path, member_of

VIEW_KEY = "openblox-rootfs-erofs"


def chain_id(diff_ids: Sequence[str]) -> str:
    """The OCI chain ID of a stack of layers: containerd's key of its top snapshot."""
    if not diff_ids:
        raise ValueError("an image with no layers has no snapshot")
    chain = diff_ids[0]
    for diff_id in diff_ids[1:]:
        chain = "sha256:" + hashlib.sha256(f"{chain} {diff_id}".encode()).hexdigest()
    return chain


def diff_ids_of(archive: Path) -> list[str]:
    with tarfile.open(archive) as outer:
        index = json.load(member_of(outer, "index.json"))
        manifest = json.load(member_of(outer, blob_path(index["manifests"][0]["digest"])))
        config = json.load(member_of(outer, blob_path(manifest["config"]["digest"])))
    diff_ids = config["rootfs"]["diff_ids"]
    if not isinstance(diff_ids, list) or not all(isinstance(d, str) for d in diff_ids):
        raise ValueError(f"{archive}: malformed rootfs.diff_ids")
    return diff_ids


def snapshot_dir(mounts: Sequence[Mapping[str, Any]]) -> str:
    """The directory a read-only view of one committed snapshot binds: what a container's
    rootfs overlay names as its lower layer. A view of an image of several layers is an
    overlay of several directories; images are built here with one layer, and such an
    image is refused rather than imaged by a path nothing exercises."""
    if len(mounts) != 1:
        raise ValueError(f"a view with {len(mounts)} mounts")
    mount = mounts[0]
    if mount.get("Type") == "bind":
        return str(mount["Source"])
    options = [str(o) for o in mount.get("Options") or []]
    raise ValueError(
        f"a view mounted as {mount.get('Type')!r} with {options}: only an image of one "
        "layer is made into an EROFS image"
    )


def read_index(index: Path) -> dict[str, str]:
    entries: dict[str, str] = {}
    if index.is_file():
        for line in index.read_text().splitlines():
            snapshot, _, image = line.partition("\t")
            if snapshot and image:
                entries[snapshot] = image
    return entries


def format_index(entries: dict[str, str]) -> str:
    return "".join(f"{snapshot}\t{image}\n" for snapshot, image in sorted(entries.items()))


class SnapshotViews(Protocol):
    def view_dir(self, chain: str) -> str: ...


class Containerd:
    def __init__(self, ctr: str, address: str) -> None:
        self.base = [ctr, "--address", address, "-n", "k8s.io", "snapshots"]

    def view_dir(self, chain: str) -> str:
        key = f"{VIEW_KEY}-{os.getpid()}"
        subprocess.run([*self.base, "rm", key], capture_output=True, check=False)
        made = subprocess.run(
            [*self.base, "view", "--mounts", key, chain],
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            if made.returncode != 0:
                raise RuntimeError(f"no snapshot {chain}: {made.stderr.strip()}")
            return snapshot_dir(json.loads(made.stdout))
        finally:
            subprocess.run([*self.base, "rm", key], capture_output=True, check=False)


def make_image(snapshot: str, image: Path) -> None:
    """An EROFS image of the snapshot's directory, replacing image atomically."""
    partial = image.with_name(image.name + ".partial")
    subprocess.run([*MKFS, "--quiet", str(partial), snapshot], check=True)
    partial.chmod(0o644)
    partial.replace(image)


def update(
    containerd: SnapshotViews, images_dir: Path, index: Path, archives: Sequence[Path]
) -> None:
    images_dir.mkdir(parents=True, exist_ok=True)
    previous = read_index(index)
    entries: dict[str, str] = {}
    for archive in archives:
        chain = chain_id(diff_ids_of(archive))
        snapshot = containerd.view_dir(chain)
        image = images_dir / f"{chain.removeprefix('sha256:')[:16]}.erofs"
        if previous.get(snapshot) != str(image) or not image.is_file():
            make_image(snapshot, image)
        entries[snapshot] = str(image)
    index.parent.mkdir(parents=True, exist_ok=True)
    partial = index.with_name(index.name + ".partial")
    partial.write_text(format_index(entries))
    partial.chmod(0o644)
    partial.replace(index)
    named = set(entries.values())
    for stale in images_dir.glob("*.erofs"):
        if str(stale) not in named:
            stale.unlink()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ctr", default="ctr")
    parser.add_argument("--address", required=True)
    parser.add_argument("images_dir", type=Path)
    parser.add_argument("index", type=Path)
    parser.add_argument("archives", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if shutil.which(MKFS[0]) is None:
        print(f"rootfs_erofs: {MKFS[0]} not found (Debian package erofs-utils)", file=sys.stderr)
        return 1
    update(Containerd(args.ctr, args.address), args.images_dir, args.index, args.archives)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
