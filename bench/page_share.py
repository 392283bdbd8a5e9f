"""PSS with the sandbox software's own pages split among the measured sandboxes only.

The kernel's PSS divides a page among every process that maps it. The pages of the
runsc and shim binaries and of the rootfs images are mapped by every sandbox on the
host: the measured ones, and any others (another tenant's Sandboxes on the node, kind's
node containers under the same dockerd and their shims). The more of those run, the
cheaper the measured sandboxes look, on either side of a comparison. Here the pages of
those files are divided among the measured processes only; every other page (libc, say)
stays divided as the kernel divides it.

Reads /proc/<pid>/pagemap and /proc/kpagecount, which need root (as the benchmark runs).
"""

from __future__ import annotations

import os
import struct
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

PROC = Path("/proc")
PAGE = os.sysconf("SC_PAGE_SIZE")
# pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst)
_PRESENT = 1 << 63
_FILE_OR_SHARED_ANON = 1 << 61
_PFN = (1 << 55) - 1
# Files the sandboxes' processes map besides their own binaries: the EROFS images the
# Sentry serves a pod's rootfs from (docs/adr/0012 to 0014).
IMAGE_SUFFIXES = (".erofs",)


def own_files(pids: Iterable[int]) -> set[str]:
    """The binaries the processes run, and the rootfs images they map."""
    files: set[str] = set()
    for pid in pids:
        try:
            files.add(os.path.realpath(PROC / str(pid) / "exe"))
        except OSError:
            continue
        for _, _, path in _mappings(pid):
            if path.endswith(IMAGE_SUFFIXES):
                files.add(path)
    return files


def _mappings(pid: int) -> list[tuple[int, int, str]]:
    """(start, end, path) of each file mapping of the process."""
    found: list[tuple[int, int, str]] = []
    try:
        lines = (PROC / str(pid) / "maps").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            start, end = (int(x, 16) for x in fields[0].split("-"))
            found.append((start, end, fields[5]))
    return found


def file_pages(pid: int, files: set[str]) -> set[int]:
    """Page frames of the process's mappings of files that are in the page cache and
    mapped (its private copies, written pages of .data, are its own: not listed)."""
    frames: set[int] = set()
    ranges = [(start, end) for start, end, path in _mappings(pid) if path in files]
    if not ranges:
        return frames
    try:
        with (PROC / str(pid) / "pagemap").open("rb") as pagemap:
            for start, end in ranges:
                pagemap.seek(start // PAGE * 8)
                data = pagemap.read((end - start) // PAGE * 8)
                for (entry,) in struct.iter_unpack("<Q", data):
                    if entry & _PRESENT and entry & _FILE_OR_SHARED_ANON and entry & _PFN:
                        frames.add(entry & _PFN)
    except OSError:
        return set()
    return frames


def mapcounts(frames: Iterable[int]) -> dict[int, int]:
    """How many mappings of each page frame there are on the whole host."""
    counts = {}
    with (PROC / "kpagecount").open("rb") as kpagecount:
        for frame in sorted(set(frames)):
            kpagecount.seek(frame * 8)
            (counts[frame],) = struct.unpack("<Q", kpagecount.read(8))
    return counts


def regrouped(pages: Mapping[int, set[int]], host: Mapping[int, int]) -> dict[int, float]:
    """Bytes to add to each process's PSS when the page frames it maps are divided among
    the processes in `pages` only, instead of among all `host[frame]` mappings."""
    measured = Counter(frame for frames in pages.values() for frame in frames)
    extra = {}
    for pid, frames in pages.items():
        extra[pid] = sum(
            PAGE / measured[frame] - PAGE / max(host.get(frame, 0), measured[frame])
            for frame in frames
        )
    return extra


def extra_pss(pids: Iterable[int]) -> dict[int, float]:
    """For each of pids, the bytes its own-software pages are under-counted by the
    kernel's PSS because processes outside pids map them too (0 when none do)."""
    wanted = list(dict.fromkeys(pids))
    files = own_files(wanted)
    pages = {pid: file_pages(pid, files) for pid in wanted}
    return regrouped(pages, mapcounts(f for frames in pages.values() for f in frames))
