"""The install overlay: each image by digest from this tree's build records, and the shipped
profiles given the sandbox image's digest (cluster/install_images.py, docs/adr/0021)."""

from __future__ import annotations

import hashlib
import importlib
import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "cluster"))

import install_images  # noqa: E402
from openblox.models import parse_profiles  # noqa: E402

DIGESTS = {name: "sha256:" + str(index) * 64 for index, name in enumerate(("a", "b"), start=1)}


def _record(cache: Path, name: str, key: str, digest: str) -> None:
    ref = f"openblox.local/{name}:{key}"
    record = {
        "ref": ref,
        "config": {"digest": "sha256:" + "c" * 64},
        "manifest": {"digest": digest},
    }
    (cache / f"{name}-{key}.json").write_text(json.dumps(record))


def _cache(tmp_path: Path) -> Path:
    for index, name in enumerate(install_images.INSTALLED_IMAGES):
        _record(tmp_path, name, "old", "sha256:" + "e" * 64)
        _record(tmp_path, name, "new", "sha256:" + str(index + 1) * 64)
        (tmp_path / f"{name}.ref").write_text(f"openblox.local/{name}:new\n")
    return tmp_path


def test_the_last_build_is_the_one_the_ref_file_names(tmp_path: Path) -> None:
    images = install_images.built_images(_cache(tmp_path))

    assert images["operator"].reference == "openblox.local/operator@sha256:" + "1" * 64
    assert images["sandbox"].digest == "sha256:" + "3" * 64


def test_a_registry_moves_every_image_and_keeps_its_digest(tmp_path: Path) -> None:
    images = install_images.built_images(_cache(tmp_path), "localhost:5001/team/")

    assert images["node-agent"].reference == "localhost:5001/team/node-agent@sha256:" + "2" * 64


def test_an_image_never_built_is_named_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(install_images.ImageNotBuilt, match=r"no operator image is built .*make up"):
        install_images.built_images(tmp_path)


def test_a_build_record_without_a_digest_is_refused(tmp_path: Path) -> None:
    (tmp_path / "sandbox.ref").write_text("openblox.local/sandbox:k\n")
    _record(tmp_path, "sandbox", "k", "latest")

    with pytest.raises(install_images.ImageNotBuilt, match="records no manifest digest"):
        install_images.built_digest("sandbox", tmp_path)


def test_the_overlay_pins_the_workloads_and_the_shipped_profiles(tmp_path: Path) -> None:
    images = install_images.built_images(_cache(tmp_path), "localhost:5001")
    shipped = (REPO / "manifests" / "profiles.yaml").read_text()

    files = install_images.overlay(images, "../../work/manifests", shipped)

    kustomization = yaml.safe_load(files["kustomization.yaml"])
    assert kustomization["resources"] == ["../../work/manifests"]
    assert kustomization["images"] == [
        {
            "name": "openblox.local/operator",
            "newName": "localhost:5001/operator",
            "digest": "sha256:" + "1" * 64,
        },
        {
            "name": "openblox.local/node-agent",
            "newName": "localhost:5001/node-agent",
            "digest": "sha256:" + "2" * 64,
        },
    ]
    profiles, broken = parse_profiles(yaml.safe_load(files["profiles.yaml"])["data"])
    assert not broken
    assert {profile.image for profile in profiles.values()} == {
        "localhost:5001/sandbox@sha256:" + "3" * 64
    }


def test_the_shipped_profiles_name_no_image_until_an_install_pins_one() -> None:
    shipped = yaml.safe_load((REPO / "manifests" / "profiles.yaml").read_text())["data"]
    profiles, broken = parse_profiles(shipped)

    assert not broken
    assert {profile.image for profile in profiles.values()} == {
        install_images.SHIPPED_SANDBOX_IMAGE
    }


def test_profiles_without_the_shipped_image_are_refused() -> None:
    sandbox = install_images.pinned("sandbox", "sha256:" + "3" * 64)

    with pytest.raises(ValueError, match=r"names no openblox\.local/sandbox@sha256:0000"):
        install_images.pinned_profiles("data: {}\n", sandbox)


def _push_module() -> Any:
    """cluster/images/push.py, which runs as a script beside the image builder."""
    sys.path.insert(0, str(REPO / "cluster" / "images"))
    return importlib.import_module("push")


def test_a_manifest_is_pushed_as_built_unless_annotated() -> None:
    push = _push_module()
    original = json.dumps(
        {
            "schemaVersion": 2,
            "config": {"digest": "sha256:" + "c" * 64},
            "layers": [{"digest": "sha256:" + "d" * 64}],
        }
    ).encode()

    as_built = push.manifest_of(original, {})
    annotated = push.manifest_of(original, {"sh.openblox.test": "x"})

    assert as_built.body == original
    assert as_built.digest == "sha256:" + hashlib.sha256(original).hexdigest()
    # Another digest over the very same blobs: an image only the registry has.
    assert annotated.digest != as_built.digest
    assert annotated.blobs == as_built.blobs == ("sha256:" + "c" * 64, "sha256:" + "d" * 64)
    assert json.loads(annotated.body)["annotations"] == {"sh.openblox.test": "x"}


def test_a_registry_that_does_not_answer_is_named() -> None:
    push = _push_module()
    # A port on loopback that nothing of this test listens on: refused at once.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(push.PushError, match=f"registry {address} cannot be reached"):
        push.Registry(address).has_blob("sandbox", "sha256:" + "0" * 64)


def test_each_cluster_pulls_from_its_own_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import embedded

    kind_state = tmp_path / "kind"
    kind_state.mkdir()
    monkeypatch.setattr(embedded, "KIND_STATE", kind_state)
    monkeypatch.delenv("OPENBLOX_REGISTRY", raising=False)
    kind_kubeconfig = str(kind_state / "openblox.kubeconfig")

    # The project's kind cluster before its registry ran, and any other cluster.
    assert embedded.install_registry(kind_kubeconfig) == "openblox.local"
    assert embedded.install_registry("/home/me/.kube/config") == "openblox.local"
    (kind_state / "registry-repository").write_text("localhost:5002/openblox\n")
    assert embedded.install_registry(kind_kubeconfig) == "localhost:5002/openblox"
    # The admin's word wins everywhere.
    monkeypatch.setenv("OPENBLOX_REGISTRY", "registry.example.com/ob")
    assert embedded.install_registry(kind_kubeconfig) == "registry.example.com/ob"
