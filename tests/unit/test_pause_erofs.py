"""The listing of the pause rootfs that cluster/pause_erofs.py writes beside the node's
EROFS image, and that gVisor's patched shim compares with a pause container's own rootfs
(docs/adr/0013). The shim's Go side has the same tree and listing in
cluster/gvisor-shim/pkg/shim/v1/runsc/pause_rootfs_test.go, which cluster/build.sh runs."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))

import pause_erofs

PAUSE_BINARY = b"pause binary\n"
# The digest the Go test pins for the same bytes.
PAUSE_DIGEST = "ebec7482eaa97e60aa17563bf57bcda4897c97d38f22df4f43425f5208e03a61"


def _tree(root: Path) -> Path:
    (root / "etc" / "empty").mkdir(parents=True)
    (root / "pause").write_bytes(PAUSE_BINARY)
    (root / "pause").chmod(0o4755)
    (root / "etc" / "motd").write_bytes(b"")
    (root / "etc" / "motd").chmod(0o600)
    (root / "etc" / "link").symlink_to("../pause")
    return root


def test_the_listing_is_the_one_the_shim_writes_for_the_same_tree(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    info = (root / "pause").lstat()
    owner = f"{info.st_uid} {info.st_gid}"
    empty = hashlib.sha256(b"").hexdigest()

    assert hashlib.sha256(PAUSE_BINARY).hexdigest() == PAUSE_DIGEST
    assert pause_erofs.describe_rootfs(root) == (
        "/etc/link link ../pause\n"
        f"/etc/motd file 0600 {owner} {empty}\n"
        f"/pause file 4755 {owner} {PAUSE_DIGEST}\n"
    )


@pytest.mark.parametrize("kind", ["fifo", "white space", "nothing"])
def test_a_tree_that_is_not_a_pause_rootfs_gets_no_listing(tmp_path: Path, kind: str) -> None:
    (tmp_path / "dir").mkdir()
    if kind == "fifo":
        os.mkfifo(tmp_path / "dir" / "fifo")
    elif kind == "white space":
        (tmp_path / "a b").write_bytes(b"")

    with pytest.raises(ValueError, match=r"white space|not a file|no files"):
        pause_erofs.describe_rootfs(tmp_path)


def _archive(path: Path, entries: list[tarfile.TarInfo], layers: int = 1) -> Path:
    """An OCI archive whose manifest names an uncompressed layer holding entries (files
    of x's) `layers` times."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for entry in entries:
            tar.addfile(entry, io.BytesIO(b"x" * entry.size) if entry.isfile() else None)
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest

    manifest = json.dumps({"layers": [{"digest": blob(layer.getvalue())}] * layers}).encode()
    index = json.dumps({"manifests": [{"digest": blob(manifest)}]}).encode()
    with tarfile.open(path, "w") as outer:
        for name, data in [("index.json", index)] + [
            (f"blobs/sha256/{d.removeprefix('sha256:')}", b) for d, b in blobs.items()
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            outer.addfile(info, io.BytesIO(data))
    return path


def _entry(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o755) -> tarfile.TarInfo:
    entry = tarfile.TarInfo(name)
    entry.type, entry.mode = kind, mode
    entry.size = 4 if kind == tarfile.REGTYPE else 0
    return entry


def test_the_layer_is_unpacked_with_its_modes(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "pause.tar", [_entry("pause", mode=0o4755)])
    into = tmp_path / "rootfs"
    into.mkdir()

    pause_erofs.unpack_layer(archive, into)

    assert (into / "pause").read_bytes() == b"xxxx"
    assert stat.S_IMODE((into / "pause").lstat().st_mode) == 0o4755


@pytest.mark.parametrize(
    "entry",
    [
        _entry("../escape"),
        _entry("/absolute"),
        _entry("dir/.wh.gone"),
        _entry("dev/null", tarfile.CHRTYPE),
        _entry("hard", tarfile.LNKTYPE),
    ],
    ids=["dot-dot", "absolute", "whiteout", "device", "hard link"],
)
def test_a_layer_entry_that_is_not_a_plain_path_is_refused_and_nothing_is_unpacked(
    tmp_path: Path, entry: tarfile.TarInfo
) -> None:
    archive = _archive(tmp_path / "pause.tar", [_entry("pause"), entry])
    into = tmp_path / "rootfs"
    into.mkdir()

    with pytest.raises(ValueError, match=r"not a plain path|device, FIFO or hard link"):
        pause_erofs.unpack_layer(archive, into)
    assert list(into.iterdir()) == []


def test_an_archive_with_more_than_one_layer_is_refused(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "pause.tar", [_entry("pause")], layers=2)

    with pytest.raises(ValueError, match="expected one layer, found 2"):
        pause_erofs.unpack_layer(archive, tmp_path)
