#!/usr/bin/env python3
"""Turn a root filesystem directory into an OCI image archive, with no Docker.

The archive is an OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/``)
packed in a tar, as ``ctr images import`` reads it. It holds one image: a single layer
(the whole root filesystem), a config and a manifest. The index names the image with
both ``io.containerd.image.name`` (the full reference, which ``ctr images import`` uses)
and ``org.opencontainers.image.ref.name`` (the tag alone, as the OCI image-layout spec
and ``ctr images export`` have it).

Everything is deterministic: the same directory tree gives byte-identical blobs and
archive. Entries are sorted, every mtime is the same fixed value, owners are numeric
(no user or group names), modes including setuid bits are kept as they are, hard links
stay hard links, and device nodes, FIFOs and sockets are left out (the runtime provides
/dev). The layer can be stored uncompressed or gzip-compressed.

    oci.py build ROOTFS -o ARCHIVE (--ref NAME:TAG | --name NAME) [config options]
    oci.py inspect ARCHIVE

With ``--name`` the tag is the first 12 hex digits of the manifest digest, so a tag
never names two different images. ``build`` prints the image reference on stdout.

Only the standard library is used.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import stat
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal, Protocol

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
MEDIA_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"
ANNOTATION_CONTAINERD_NAME = "io.containerd.image.name"
ANNOTATION_CREATED = "org.opencontainers.image.created"
SHORT_DIGEST_LEN = 12
CHUNK = 1 << 20

Compression = Literal["gzip", "none"]

_GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}


class OCIError(Exception):
    """A root filesystem or archive that cannot be turned into, or read as, an image."""


@dataclass(frozen=True)
class ImageConfig:
    """The runtime part of an OCI image config (``config`` in the config blob)."""

    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    user: str = ""
    env: list[str] = field(default_factory=list)
    working_dir: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    stop_signal: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.user:
            out["User"] = self.user
        if self.env:
            out["Env"] = list(self.env)
        if self.entrypoint is not None:
            out["Entrypoint"] = list(self.entrypoint)
        if self.cmd is not None:
            out["Cmd"] = list(self.cmd)
        if self.working_dir:
            out["WorkingDir"] = self.working_dir
        if self.labels:
            out["Labels"] = dict(sorted(self.labels.items()))
        if self.stop_signal:
            out["StopSignal"] = self.stop_signal
        return out


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class Layer:
    descriptor: Descriptor
    diff_id: str
    entries: int
    uncompressed_size: int


@dataclass(frozen=True)
class BuiltImage:
    """What ``build_image`` made: enough to import the archive and check the result."""

    ref: str
    archive: Path
    manifest: Descriptor
    config: Descriptor
    layer: Descriptor
    diff_id: str
    entries: int
    uncompressed_size: int

    @property
    def digest(self) -> str:
        """The manifest digest: what containerd records as the image's target."""
        return self.manifest.digest

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "digest": self.manifest.digest,
            "archive": str(self.archive),
            "archive_size": self.archive.stat().st_size,
            "manifest": self.manifest.to_json(),
            "config": self.config.to_json(),
            "layer": self.layer.to_json(),
            "diff_id": self.diff_id,
            "entries": self.entries,
            "uncompressed_size": self.uncompressed_size,
        }


class _Sink(Protocol):
    def write(self, b: bytes, /) -> int: ...


class _HashingWriter(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through it."""

    def __init__(self, sink: _Sink) -> None:
        super().__init__()
        self._sink = sink
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        self._sink.write(data)
        self.sha.update(data)
        self.size += len(data)
        return len(data)

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


def goarch(machine: str | None = None) -> str:
    """The OCI/Go name of this (or the given) machine's architecture."""
    m = (machine or platform.machine()).lower()
    try:
        return _GOARCH[m]
    except KeyError:
        raise OCIError(f"unknown architecture {m!r}; pass --arch") from None


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def iter_tree(root: Path) -> Iterator[str]:
    """Every path under root (not root itself), relative, '/'-separated, sorted.

    Plain sorting puts each directory before everything in it. Symbolic links to
    directories are listed but not followed.
    """
    paths: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel = os.path.relpath(dirpath, root)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        paths.extend(prefix + n for n in dirnames)
        paths.extend(prefix + n for n in filenames)
    paths.sort(key=lambda p: p.encode("utf-8", "surrogateescape"))
    return iter(paths)


def _normalise(info: tarfile.TarInfo, mtime: int) -> tarfile.TarInfo:
    info.mtime = mtime
    info.uname = ""
    info.gname = ""
    info.pax_headers = {}
    return info


def write_layer(
    root: Path,
    out: IO[bytes],
    *,
    compression: Compression = "gzip",
    mtime: int = 0,
    gzip_level: int = 6,
) -> Layer:
    """Write root as one deterministic layer tar to out; return its descriptor."""
    if not root.is_dir():
        raise OCIError(f"{root}: not a directory")
    blob = _HashingWriter(out)
    gz: gzip.GzipFile | None = None
    sink: _Sink = blob
    if compression == "gzip":
        gz = gzip.GzipFile(filename="", mode="wb", fileobj=blob, mtime=0, compresslevel=gzip_level)
        sink = gz
    plain = _HashingWriter(sink)
    entries = 0
    with tarfile.open(
        fileobj=plain,
        mode="w|",
        format=tarfile.PAX_FORMAT,
        encoding="utf-8",
        errors="surrogateescape",
    ) as tar:
        for rel in iter_tree(root):
            path = root / rel
            st = path.lstat()
            if not (
                stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)
            ):
                continue  # device nodes, FIFOs, sockets: the runtime provides /dev
            info = tar.gettarinfo(str(path), arcname=rel)
            _normalise(info, mtime)
            if info.isreg():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
            entries += 1
    if gz is not None:
        gz.close()
    media = MEDIA_LAYER_GZIP if compression == "gzip" else MEDIA_LAYER_TAR
    return Layer(Descriptor(media, blob.digest, blob.size), plain.digest, entries, plain.size)


def _write_blob(blobs: Path, data: bytes, media_type: str) -> Descriptor:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (blobs / digest.removeprefix("sha256:")).write_bytes(data)
    return Descriptor(media_type, digest, len(data))


def _rfc3339(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def split_ref(ref: str) -> tuple[str, str]:
    """('openblox.local/pause', '3.10') from 'openblox.local/pause:3.10'."""
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag or not name or not tag or "@" in ref:
        raise OCIError(f"{ref!r}: expected NAME:TAG")
    return name, tag


def _pack_layout(layout: Path, archive: Path, mtime: int) -> None:
    """Pack the layout directory into a deterministic tar at archive (atomically)."""
    partial = archive.with_name(archive.name + ".partial")
    with (
        partial.open("wb") as f,
        tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel in iter_tree(layout):
            info = tar.gettarinfo(str(layout / rel), arcname=rel)
            _normalise(info, mtime)
            info.uid = info.gid = 0
            info.mode = 0o755 if info.isdir() else 0o644
            if info.isreg():
                with (layout / rel).open("rb") as blob:
                    tar.addfile(info, blob)
            else:
                tar.addfile(info)
    partial.replace(archive)


def build_image(
    root: Path,
    archive: Path,
    *,
    config: ImageConfig,
    ref: str | None = None,
    name: str | None = None,
    compression: Compression = "gzip",
    mtime: int = 0,
    arch: str | None = None,
    gzip_level: int = 6,
) -> BuiltImage:
    """Build an OCI archive of root at archive, named ref, or name:<short digest>."""
    if (ref is None) == (name is None):
        raise OCIError("give exactly one of ref and name")
    if ref is not None:
        split_ref(ref)
    elif name is not None and (":" in name.rsplit("/", 1)[-1] or "@" in name):
        raise OCIError(f"{name!r}: a name without a tag was expected")
    architecture = arch or goarch()
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".oci-", dir=archive.parent) as tmp:
        layout = Path(tmp)
        blobs = layout / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        staging = layout / "layer.partial"
        with staging.open("wb") as f:
            layer = write_layer(
                root, f, compression=compression, mtime=mtime, gzip_level=gzip_level
            )
        staging.rename(blobs / layer.descriptor.digest.removeprefix("sha256:"))

        created = _rfc3339(mtime)
        config_doc: dict[str, Any] = {
            "created": created,
            "architecture": architecture,
            "os": "linux",
            "config": config.to_json(),
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
            "history": [{"created": created, "created_by": "openblox cluster/images/oci.py"}],
        }
        config_desc = _write_blob(blobs, canonical_json(config_doc), MEDIA_CONFIG)
        manifest_doc = {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": config_desc.to_json(),
            "layers": [layer.descriptor.to_json()],
        }
        manifest_desc = _write_blob(blobs, canonical_json(manifest_doc), MEDIA_MANIFEST)
        if ref is None:
            short = manifest_desc.digest.removeprefix("sha256:")[:SHORT_DIGEST_LEN]
            ref = f"{name}:{short}"
        _, tag = split_ref(ref)
        index_doc = {
            "schemaVersion": 2,
            "mediaType": MEDIA_INDEX,
            "manifests": [
                {
                    **manifest_desc.to_json(),
                    "platform": {"architecture": architecture, "os": "linux"},
                    "annotations": {
                        ANNOTATION_CONTAINERD_NAME: ref,
                        ANNOTATION_REF_NAME: tag,
                        ANNOTATION_CREATED: created,
                    },
                }
            ],
        }
        (layout / "index.json").write_bytes(canonical_json(index_doc))
        (layout / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
        _pack_layout(layout, archive, mtime)
    return BuiltImage(
        ref=ref,
        archive=archive,
        manifest=manifest_desc,
        config=config_desc,
        layer=layer.descriptor,
        diff_id=layer.diff_id,
        entries=layer.entries,
        uncompressed_size=layer.uncompressed_size,
    )


def inspect_archive(archive: Path) -> dict[str, Any]:
    """The reference, manifest digest and config of the (first) image in an archive."""
    try:
        with tarfile.open(archive, "r:") as tar:

            def read(name: str) -> Any:
                member = tar.extractfile(name)
                if member is None:
                    raise OCIError(f"{archive}: {name} is not a file")
                return json.loads(member.read())

            index = read("index.json")
            desc = index["manifests"][0]
            manifest = read("blobs/sha256/" + desc["digest"].removeprefix("sha256:"))
            config = read("blobs/sha256/" + manifest["config"]["digest"].removeprefix("sha256:"))
    except (tarfile.TarError, KeyError, IndexError, OSError, ValueError) as e:
        raise OCIError(f"{archive}: not a readable OCI archive: {e}") from e
    annotations = desc.get("annotations", {})
    return {
        "ref": annotations.get(ANNOTATION_CONTAINERD_NAME, annotations.get(ANNOTATION_REF_NAME)),
        "digest": desc["digest"],
        "platform": desc.get("platform"),
        "layers": manifest["layers"],
        "config": config.get("config", {}),
    }


def _json_list(value: str) -> list[str]:
    try:
        parsed = json.loads(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from e
    if not isinstance(parsed, list) or not all(isinstance(x, str) for x in parsed):
        raise argparse.ArgumentTypeError("expected a JSON list of strings")
    return parsed


def _key_value(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{value!r}: expected KEY=VALUE")
    return key, val


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="oci.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="root filesystem directory -> OCI archive")
    b.add_argument("rootfs", type=Path)
    b.add_argument("-o", "--output", type=Path, required=True, help="archive to write")
    which = b.add_mutually_exclusive_group(required=True)
    which.add_argument("--ref", help="full reference NAME:TAG")
    which.add_argument("--name", help="NAME only: tag with the short manifest digest")
    b.add_argument("--entrypoint", type=_json_list, help='JSON list, e.g. ["/pause"]')
    b.add_argument("--cmd", type=_json_list, help="JSON list")
    b.add_argument("--user", default="", help="e.g. 1000:1000")
    b.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    b.add_argument("--workdir", default="")
    b.add_argument("--label", action="append", default=[], type=_key_value, metavar="KEY=VALUE")
    b.add_argument("--stop-signal", default="")
    b.add_argument("--compression", choices=["gzip", "none"], default="gzip")
    b.add_argument("--gzip-level", type=int, default=6, choices=range(1, 10))
    b.add_argument(
        "--mtime",
        type=int,
        default=int(os.environ.get("SOURCE_DATE_EPOCH", "0") or 0),
        help="mtime of every entry (default: $SOURCE_DATE_EPOCH or 0)",
    )
    b.add_argument("--arch", help="OCI architecture (default: this machine's)")
    b.add_argument("--metadata", type=Path, help="also write a JSON summary here")
    i = sub.add_parser("inspect", help="print an archive's reference, digest and config")
    i.add_argument("archive", type=Path)
    layer = sub.add_parser(
        "layer", help="write the image's one layer (a tar, maybe gzipped) to stdout"
    )
    layer.add_argument("archive", type=Path)
    return p


def write_layer_to(archive: Path, out: BinaryIO) -> None:
    """Copies the one layer of the archive's image to `out`: what `docker import` takes,
    where a Docker daemon with the classic image store cannot load an OCI layout."""
    layers = inspect_archive(archive)["layers"]
    if len(layers) != 1:
        raise OCIError(f"{archive}: {len(layers)} layers; only one-layer images can be copied")
    with tarfile.open(archive, "r:") as tar:
        member = tar.extractfile("blobs/sha256/" + layers[0]["digest"].removeprefix("sha256:"))
        if member is None:
            raise OCIError(f"{archive}: its layer blob is missing")
        shutil.copyfileobj(member, out)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "inspect":
            print(json.dumps(inspect_archive(args.archive), indent=2, sort_keys=True))
            return 0
        if args.command == "layer":
            write_layer_to(args.archive, sys.stdout.buffer)
            return 0
        for item in args.env:
            _key_value(item)
        config = ImageConfig(
            entrypoint=args.entrypoint,
            cmd=args.cmd,
            user=args.user,
            env=args.env,
            working_dir=args.workdir,
            labels=dict(args.label),
            stop_signal=args.stop_signal,
        )
        image = build_image(
            args.rootfs,
            args.output,
            config=config,
            ref=args.ref,
            name=args.name,
            compression=args.compression,
            mtime=args.mtime,
            arch=args.arch,
            gzip_level=args.gzip_level,
        )
        if args.metadata is not None:
            meta = image.to_json()
            args.metadata.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        print(image.ref)
    except (OCIError, OSError, argparse.ArgumentTypeError) as e:
        print(f"oci.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
