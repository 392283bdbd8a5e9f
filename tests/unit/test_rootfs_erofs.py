"""cluster/rootfs_erofs.py: which snapshot a container image unpacked into, and the index
gVisor's patched shim reads to serve a sandbox container's rootfs from an EROFS image made
of that snapshot (docs/adr/0014). The shim's side is
cluster/gvisor-shim/pkg/shim/v1/runsc/container_rootfs_test.go, which cluster/build.sh runs."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))

import rootfs_erofs

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


def test_one_layers_chain_id_is_its_diff_id_and_each_layer_above_hashes_onto_it() -> None:
    assert rootfs_erofs.chain_id([A]) == A
    # The OCI image spec: ChainID(L0|L1) = Digest(ChainID(L0) + " " + DiffID(L1)).
    two = "sha256:" + hashlib.sha256(f"{A} {B}".encode()).hexdigest()
    assert rootfs_erofs.chain_id([A, B]) == two
    three = "sha256:" + hashlib.sha256(f"{two} {A}".encode()).hexdigest()
    assert rootfs_erofs.chain_id([A, B, A]) == three
    with pytest.raises(ValueError, match="no layers"):
        rootfs_erofs.chain_id([])


def _archive(path: Path, diff_ids: object) -> Path:
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    config_digest = hashlib.sha256(config).hexdigest()
    manifest = json.dumps({"config": {"digest": f"sha256:{config_digest}"}, "layers": []}).encode()
    manifest_digest = hashlib.sha256(manifest).hexdigest()
    index = json.dumps({"manifests": [{"digest": f"sha256:{manifest_digest}"}]}).encode()
    with tarfile.open(path, "w") as archive:
        for name, data in (
            ("index.json", index),
            (f"blobs/sha256/{manifest_digest}", manifest),
            (f"blobs/sha256/{config_digest}", config),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_the_diff_ids_come_from_the_archives_image_config(tmp_path: Path) -> None:
    assert rootfs_erofs.diff_ids_of(_archive(tmp_path / "i.tar", [A, B])) == [A, B]
    with pytest.raises(ValueError, match=r"malformed rootfs\.diff_ids"):
        rootfs_erofs.diff_ids_of(_archive(tmp_path / "bad.tar", "not a list"))


def test_a_views_directory_is_what_a_containers_rootfs_names_as_its_lower_layer() -> None:
    one_layer = [{"Type": "bind", "Source": "/s/2/fs", "Options": ["ro", "rbind"]}]
    assert rootfs_erofs.snapshot_dir(one_layer) == "/s/2/fs"
    layers = [{"Type": "overlay", "Source": "overlay", "Options": ["lowerdir=/s/3/fs:/s/2/fs"]}]
    with pytest.raises(ValueError, match="only an image of one layer"):
        rootfs_erofs.snapshot_dir(layers)
    for bad in ([], one_layer * 2, [{"Type": "tmpfs", "Source": "x", "Options": []}]):
        with pytest.raises(ValueError):
            rootfs_erofs.snapshot_dir(bad)


class _Node:
    """containerd as rootfs_erofs sees it: each chain id's snapshot directory."""

    def __init__(self, snapshots: dict[str, str]) -> None:
        self.snapshots = snapshots

    def view_dir(self, chain: str) -> str:
        if chain not in self.snapshots:
            raise RuntimeError(f"no snapshot {chain}")
        return self.snapshots[chain]


def test_the_index_names_the_given_images_keeps_what_was_made_and_deletes_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []

    def make_image(snapshot: str, image: Path) -> None:
        made.append(snapshot)
        image.write_text(snapshot)

    monkeypatch.setattr(rootfs_erofs, "make_image", make_image)
    images, index = tmp_path / "images", tmp_path / "config" / "rootfs-images"
    old, new = _archive(tmp_path / "old.tar", [A]), _archive(tmp_path / "new.tar", [B])
    node = _Node({A: "/s/2/fs", B: "/s/7/fs"})

    rootfs_erofs.update(node, images, index, [old])
    old_image = images / f"{'a' * 16}.erofs"
    assert index.read_text() == f"/s/2/fs\t{old_image}\n"
    rootfs_erofs.update(node, images, index, [old])
    assert made == ["/s/2/fs"], "an image already made for the snapshot is made again"

    rootfs_erofs.update(node, images, index, [new])
    new_image = images / f"{'b' * 16}.erofs"
    assert index.read_text() == f"/s/7/fs\t{new_image}\n"
    assert sorted(p.name for p in images.iterdir()) == [new_image.name]


def test_an_image_containerd_has_not_unpacked_leaves_the_index_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rootfs_erofs, "make_image", lambda s, i: i.write_text(s))
    images, index = tmp_path / "images", tmp_path / "rootfs-images"
    rootfs_erofs.update(_Node({A: "/s/2/fs"}), images, index, [_archive(tmp_path / "a.tar", [A])])
    before = index.read_text()
    with pytest.raises(RuntimeError, match="no snapshot"):
        rootfs_erofs.update(_Node({}), images, index, [_archive(tmp_path / "b.tar", [B])])
    assert index.read_text() == before
    assert (images / f"{'a' * 16}.erofs").is_file()
