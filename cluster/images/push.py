"""Push an image from an OCI archive (cluster/images/oci.py) to a registry over the
distribution API, the way `docker push` would, with nothing but the standard library.

    push.py ARCHIVE REGISTRY REPOSITORY [--tag TAG]... [--annotate KEY=VALUE]...

REGISTRY is host:port, spoken to over plain HTTP: only a registry this project started on
this machine (loopback, or the kind network) is ever named. Each blob is sent only if the
registry does not have it; the manifest goes last, under its digest and each TAG. Prints the
manifest digest, which is what an install names the image by (docs/adr/0021).

--annotate pushes the same image under another manifest digest (the manifest with the
annotation added, every blob the same): an image a node can only have from the registry,
which is what the tests of pulling need.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
TIMEOUT_SECONDS = 60


class PushError(Exception):
    """The registry refused or could not be reached; the message says which and why."""


@dataclass(frozen=True)
class Manifest:
    """A manifest as it is sent: its exact bytes, its digest and the blobs it names."""

    body: bytes
    blobs: tuple[str, ...]

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.body).hexdigest()


def manifest_of(original: bytes, annotations: dict[str, str]) -> Manifest:
    """The manifest to push: `original`'s bytes as they are, or with `annotations` added (a
    new digest over the same blobs)."""
    document = json.loads(original)
    blobs = (document["config"]["digest"], *(layer["digest"] for layer in document["layers"]))
    if not annotations:
        return Manifest(original, blobs)
    document["annotations"] = {**document.get("annotations", {}), **annotations}
    return Manifest(json.dumps(document, sort_keys=True, separators=(",", ":")).encode(), blobs)


class Registry:
    """One registry's distribution API over plain HTTP."""

    def __init__(self, address: str) -> None:
        self.address = address

    def request(
        self,
        method: str,
        target: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        host, _, port = self.address.partition(":")
        connection = http.client.HTTPConnection(host, int(port or 80), timeout=TIMEOUT_SECONDS)
        try:
            connection.request(method, target, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        except OSError as error:
            raise PushError(f"registry {self.address} cannot be reached: {error}") from error
        finally:
            connection.close()

    def has_blob(self, repository: str, digest: str) -> bool:
        status, _, _ = self.request("HEAD", f"/v2/{repository}/blobs/{digest}")
        return status == 200

    def put_blob(self, repository: str, digest: str, data: bytes) -> None:
        status, headers, body = self.request("POST", f"/v2/{repository}/blobs/uploads/")
        location = headers.get("Location") or headers.get("location")
        if status != 202 or not location:
            raise PushError(
                f"{repository}: upload of {digest} not started: {status} {body[:200]!r}"
            )
        target = location.split(self.address, 1)[-1] if "://" in location else location
        separator = "&" if "?" in target else "?"
        status, _, body = self.request(
            "PUT",
            f"{target}{separator}digest={digest}",
            data,
            {"Content-Type": "application/octet-stream", "Content-Length": str(len(data))},
        )
        if status != 201:
            raise PushError(f"{repository}: blob {digest} refused: {status} {body[:200]!r}")

    def put_manifest(self, repository: str, reference: str, manifest: Manifest) -> None:
        status, _, body = self.request(
            "PUT",
            f"/v2/{repository}/manifests/{reference}",
            manifest.body,
            {"Content-Type": MANIFEST_MEDIA_TYPE},
        )
        if status != 201:
            raise PushError(f"{repository}: manifest {reference} refused: {status} {body[:200]!r}")


def push(
    archive: Path,
    registry: Registry,
    repository: str,
    tags: Sequence[str] = (),
    annotations: dict[str, str] | None = None,
) -> str:
    """Pushes the archive's image; returns the manifest digest the registry holds it by."""
    with tarfile.open(archive, "r:") as tar:

        def blob(digest: str) -> bytes:
            member = tar.extractfile("blobs/sha256/" + digest.removeprefix("sha256:"))
            if member is None:
                raise PushError(f"{archive}: blob {digest} is missing")
            return member.read()

        index_file = tar.extractfile("index.json")
        if index_file is None:
            raise PushError(f"{archive}: no index.json; not an OCI archive")
        descriptor = json.loads(index_file.read())["manifests"][0]
        manifest = manifest_of(blob(descriptor["digest"]), annotations or {})
        for digest in manifest.blobs:
            if not registry.has_blob(repository, digest):
                registry.put_blob(repository, digest, blob(digest))
    registry.put_manifest(repository, manifest.digest, manifest)
    for tag in tags:
        registry.put_manifest(repository, tag, manifest)
    return manifest.digest


def _annotation(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{value!r}: expected KEY=VALUE")
    return key, val


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archive", type=Path)
    parser.add_argument("registry", help="host:port, over plain HTTP")
    parser.add_argument("repository")
    parser.add_argument("--tag", action="append", default=[], help="may be given again")
    parser.add_argument("--annotate", type=_annotation, action="append", default=[])
    args = parser.parse_args(argv)
    try:
        digest = push(
            args.archive, Registry(args.registry), args.repository, args.tag, dict(args.annotate)
        )
    except (PushError, tarfile.TarError, KeyError, IndexError, ValueError, OSError) as error:
        print(
            f"push.py: {args.archive} to {args.registry}/{args.repository}: {error}",
            file=sys.stderr,
        )
        return 1
    print(digest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
