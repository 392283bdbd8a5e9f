"""Which image build a cluster's nodes hold, so an install restarts the operator only onto
new content (cluster/embedded.py). On kind the build is what kind.sh loaded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))

import embedded


def _cache(tmp_path: Path, built: str, records: dict[str, str]) -> Path:
    (tmp_path / "operator.ref").write_text(f"{built}\n")
    for key, ref in records.items():
        record = {
            "ref": ref,
            "config": {"digest": f"sha256:config-{key}"},
            "manifest": {"digest": f"sha256:manifest-{key}"},
        }
        (tmp_path / f"operator-{key}.json").write_text(json.dumps(record))
    return tmp_path


def test_the_last_build_is_the_one_the_ref_file_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = _cache(
        tmp_path,
        "openblox.local/operator:bbb",
        {"a": "openblox.local/operator:aaa", "b": "openblox.local/operator:bbb"},
    )
    monkeypatch.setattr(embedded, "IMAGE_CACHE", cache)

    digests = embedded._built_image_digests("openblox.local/operator:0.1.0")

    assert digests == {"sha256:config-b", "sha256:manifest-b"}


def test_no_build_and_a_foreign_cluster_restart_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded, "IMAGE_CACHE", tmp_path)
    monkeypatch.setattr(embedded, "KIND_STATE", tmp_path / "kind")

    assert embedded._built_image_digests("openblox.local/operator:0.1.0") == set()
    # A cluster whose images came from a registry: nothing is known about its nodes.
    assert embedded._loaded_image_digests("/home/me/.kube/config", "x/operator:1") == set()


def test_on_the_projects_kind_cluster_the_loaded_build_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = _cache(tmp_path, "openblox.local/operator:aaa", {"a": "openblox.local/operator:aaa"})
    monkeypatch.setattr(embedded, "IMAGE_CACHE", cache)
    monkeypatch.setattr(embedded, "KIND_STATE", tmp_path / "kind")

    loaded = embedded._loaded_image_digests(
        str(tmp_path / "kind" / "openblox.kubeconfig"), "openblox.local/operator:0.1.0"
    )

    assert loaded == {"sha256:config-a", "sha256:manifest-a"}
