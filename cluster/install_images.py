"""The images an install names, each pinned by digest, and the kustomize overlay that points
`manifests/` at them (docs/adr/0021).

`manifests/` names the project's images by repository only (`openblox.local/operator`,
...); the sandbox image in the shipped profiles carries a digest that names no image. An
install is an overlay over it: kustomize's `images` entries give each workload image its
registry and digest, and a patch gives the profiles the sandbox image's digest. This tree's
builds (cluster/images/build.sh) record each image's manifest digest beside its archive;
`make up` and `cluster/kind/kind.sh install` write the overlay from them. A user's own
install is the same overlay with their registry and the digests of the images they pushed.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# The repository every manifest and shipped profile names an image of openblox by.
SOURCE_REGISTRY = "openblox.local"
WORKLOAD_IMAGES = ("operator", "node-agent")
SANDBOX_IMAGE = "sandbox"
INSTALLED_IMAGES = (*WORKLOAD_IMAGES, SANDBOX_IMAGE)
# The digest the shipped profiles carry until an install overlay replaces it: no image has it.
UNSET_DIGEST = "sha256:" + "0" * 64
SHIPPED_SANDBOX_IMAGE = f"{SOURCE_REGISTRY}/{SANDBOX_IMAGE}@{UNSET_DIGEST}"
PROFILES_FILE = "profiles.yaml"
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
DEFAULT_CACHE = Path(os.environ.get("OPENBLOX_CACHE", "/var/cache/openblox")) / "images"


class ImageNotBuilt(RuntimeError):
    """This tree has not built the image an install needs, or its build record is broken."""


@dataclass(frozen=True, slots=True)
class PinnedImage:
    """One image as an install names it: a repository in some registry, and a digest."""

    name: str
    repository: str
    digest: str

    @property
    def reference(self) -> str:
        return f"{self.repository}@{self.digest}"


def pinned(name: str, digest: str, registry: str = SOURCE_REGISTRY) -> PinnedImage:
    """The image `name` under `registry` (host[:port][/path]) at `digest`."""
    if not _DIGEST.fullmatch(digest):
        raise ValueError(f"{name}: {digest!r} is not a sha256 digest")
    return PinnedImage(name, f"{registry.rstrip('/')}/{name}", digest)


def built_digest(name: str, cache: Path) -> str:
    """The manifest digest of the image this tree last built as `name` (NAME.ref names the
    build; NAME-KEY.json records it)."""
    ref_file = cache / f"{name}.ref"
    if not ref_file.exists():
        raise ImageNotBuilt(f"no {name} image is built ({ref_file} is missing): run make up")
    built = ref_file.read_text().strip()
    for record_file in cache.glob(f"{name}-*.json"):
        record = json.loads(record_file.read_text())
        if record.get("ref") == built:
            digest = str(record.get("manifest", {}).get("digest", ""))
            if not _DIGEST.fullmatch(digest):
                raise ImageNotBuilt(f"{record_file} records no manifest digest")
            return digest
    raise ImageNotBuilt(f"no build record in {cache} is for {built} ({ref_file})")


def built_images(cache: Path, registry: str = SOURCE_REGISTRY) -> dict[str, PinnedImage]:
    """Every image an install names, as this tree built them, under `registry`."""
    return {name: pinned(name, built_digest(name, cache), registry) for name in INSTALLED_IMAGES}


def pinned_profiles(profiles_manifest: str, sandbox: PinnedImage) -> str:
    """The shipped profiles ConfigMap with the sandbox image's unset digest replaced."""
    if SHIPPED_SANDBOX_IMAGE not in profiles_manifest:
        raise ValueError(f"the profiles manifest names no {SHIPPED_SANDBOX_IMAGE}")
    return profiles_manifest.replace(SHIPPED_SANDBOX_IMAGE, sandbox.reference)


def overlay(
    images: Mapping[str, PinnedImage], manifests: str, profiles_manifest: str
) -> dict[str, str]:
    """The files of an install overlay over `manifests`, a path relative to the overlay's
    directory as kustomize requires (file name -> text)."""
    # Here, not at the top: `digest` runs under whichever python3 cluster.sh finds.
    import yaml

    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [manifests],
        "images": [
            {
                "name": f"{SOURCE_REGISTRY}/{name}",
                "newName": images[name].repository,
                "digest": images[name].digest,
            }
            for name in WORKLOAD_IMAGES
        ],
        "patches": [{"path": PROFILES_FILE}],
    }
    header = "# Written by cluster/install_images.py; an install of openblox (docs/adr/0021).\n"
    return {
        "kustomization.yaml": header + yaml.safe_dump(kustomization, sort_keys=False),
        PROFILES_FILE: pinned_profiles(profiles_manifest, images[SANDBOX_IMAGE]),
    }


def write_overlay(directory: Path, files: Mapping[str, str]) -> Path:
    """Writes the overlay's files into `directory` (replacing what an older install wrote)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        partial = directory / f".{name}.partial"
        partial.write_text(text)
        partial.replace(directory / name)
    return directory


def main(argv: list[str]) -> int:
    """`install_images.py digest NAME [CACHE]`: print the digest of the last NAME build."""
    if len(argv) not in (3, 4) or argv[1] != "digest":
        print("usage: install_images.py digest NAME [CACHE]", file=sys.stderr)
        return 2
    cache = Path(argv[3]) if len(argv) == 4 else DEFAULT_CACHE
    try:
        print(built_digest(argv[2], cache))
    except ImageNotBuilt as error:
        print(f"install_images.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
