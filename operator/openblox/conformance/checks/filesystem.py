"""Filesystem: read-only root, three writable places, nothing of the host in view."""

from __future__ import annotations

from typing import Any

from openblox.conformance.checks.registry import check
from openblox.conformance.context import CannotRun, Context, Verdict, fail, ok, volume_medium
from openblox.names import STATE_DIR, TMP_DIR, WORKSPACE_DIR

SCRATCH = (TMP_DIR, WORKSPACE_DIR, STATE_DIR)
HOST_PATHS = (
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/run/containerd",
    "/var/run/containerd",
    "/var/lib/docker",
    "/var/run/docker",
    "/var/log/pods",
    "/var/log/containers",
    "/etc/kubernetes",
    "/var/lib/openblox",
    "/var/lib/rancher",
    "/run/k3s",
    "/kubelet/pods/",
)
RUNTIME_SOCKETS = ("containerd", "docker", "kubelet", "crio", "runsc", "podman", "cri")
# (major, minor) of character devices that give nothing away: null, zero, full, random,
# urandom, tty, ptmx.
HARMLESS_DEVICES = {(1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0), (5, 2)}


def under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


@check("FS-001")
def root_read_only(ctx: Context) -> Verdict:
    result = ctx.cached("writable")
    root = result.get("root_mount") or {}
    options = str(root.get("options", "")).split(",")
    on_root = result["writable_on_root_mount"]
    text = f"/ is {root.get('fstype')} mounted {root.get('options')}"
    if "ro" not in options:
        return fail(f"{text}; created files on it in {on_root[:8]}")
    if on_root:
        return fail(f"{text} but files could be created on it in {on_root[:8]}")
    return ok(f"{text}; {len(result['refusals'])} directories refused a new file")


@check("FS-002")
def only_scratch_writable(ctx: Context) -> Verdict:
    writable: list[str] = ctx.cached("writable")["writable"]
    extra = [p for p in writable if not under(p, (*SCRATCH, "/dev/shm"))]
    text = f"writable: {writable[:12]}"
    if extra:
        return fail(f"writable outside {list(SCRATCH)}: {extra[:12]}; {text}")
    return ok(text + " (/dev/shm is FS-004's)")


@check("FS-003")
def scratch_noexec(ctx: Context) -> Verdict:
    result = ctx.probe("noexec", {"dirs": list(SCRATCH)})
    executed = {d: r for d, r in result["dirs"].items() if r.get("executed")}
    options = result["mount_options"]
    text = "; ".join(
        f"{d} ({options.get(d, 'not a mount')}): "
        + (
            "a copied binary ran"
            if r.get("executed")
            else f"exec refused: {r.get('detail')}"
            if r.get("written")
            else "not writable"
        )
        for d, r in result["dirs"].items()
    )
    if executed:
        return fail(f"binaries written to scratch run: {text}")
    return ok(text)


@check("FS-004")
def dev_shm(ctx: Context) -> Verdict:
    result = ctx.probe("shm")
    if not result.get("exists"):
        return ok("/dev/shm does not exist")
    mount = result.get("mount") or {}
    text = (
        f"/dev/shm: {mount.get('fstype')} {mount.get('options')}, "
        f"{int(result.get('size_bytes', 0)) >> 20} MiB"
    )
    if not result.get("writable"):
        return ok(f"{text}: not writable ({result.get('detail')})")
    # Writable is acceptable only as one more piece of the declared, memory-backed scratch.
    scratch = ctx.sandbox().limits.scratch_bytes
    size = int(result.get("size_bytes", 0))
    memory = mount.get("fstype") == "tmpfs" or volume_medium(ctx, "/dev/shm") == "Memory"
    if scratch and memory and 0 < size <= scratch:
        return ok(f"{text}: writable, memory-backed and within the declared scratch size")
    declared = f"{scratch >> 20} MiB" if scratch else "none"
    return fail(f"{text}: writable beyond the declared scratch (declared {declared})")


def _files(ctx: Context) -> Any:
    return ctx.backend.files(ctx.sandbox())


def _own_hostname(ctx: Context) -> tuple[str, str]:
    facts = ctx.facts()
    node = ctx.node_name() or ""
    return facts["etc_hostname"] or facts["hostname"], node


@check("FS-005")
def files_traversal(ctx: Context) -> Verdict:
    files = _files(ctx)
    mine, node = _own_hostname(ctx)
    token = ctx.token()
    problems, notes = [], []
    # A write that climbs out of /workspace lands in the sandbox's /tmp, nowhere else.
    files.write(f"/workspace/../../../../../tmp/{token}", token.encode())
    seen = ctx.exec(["cat", f"/tmp/{token}"], timeout=30)
    if seen.stdout.decode().strip() != token:
        problems.append(f"a write to /workspace/../../../../../tmp/{token} did not land inside")
    else:
        notes.append("'..' write landed in the sandbox's own /tmp")
    # Climbing into the read-only image fails instead of writing somewhere else.
    try:
        files.write(f"/workspace/../../../../etc/{token}", b"x")
        problems.append("a write to /workspace/../../../../etc/ succeeded")
    except Exception as error:
        notes.append(f"write to /workspace/../../../../etc/ refused ({str(error)[:80]})")
    read = files.read("/workspace/../../../../../../etc/hostname").decode().strip()
    if node and read == node and read != mine:
        problems.append(f"/workspace/../../etc/hostname read the node's hostname {read}")
    notes.append(f"/workspace/../../etc/hostname reads {read!r} (the sandbox is {mine!r})")
    names = {e.get("name") for e in files.list("/workspace/../../../..")}
    notes.append(f"listing /workspace/../../../.. shows {sorted(n for n in names if n)[:10]}")
    if "workspace" not in names:
        problems.append("listing /workspace/../.. does not show the sandbox's own root")
    if problems:
        return fail("; ".join(problems + notes))
    return ok("; ".join(notes))


@check("FS-006")
def files_symlinks(ctx: Context) -> Verdict:
    files = _files(ctx)
    mine, node = _own_hostname(ctx)
    token = ctx.token()
    made = ctx.exec(
        [
            "sh",
            "-c",
            f"cd /workspace && ln -sfn / {token}-root && ln -sfn /etc/hostname {token}-host "
            f"&& ln -sfn /proc/1/root {token}-p1 && ln -sfn /var/lib/kubelet {token}-kubelet",
        ],
        timeout=30,
    )
    if made.exit_code != 0:
        raise CannotRun(f"could not plant symlinks: {made.stderr.decode()[-200:]}")
    problems, notes = [], []
    read = files.read(f"/workspace/{token}-host").decode().strip()
    notes.append(f"link to /etc/hostname reads {read!r}")
    if node and read == node and read != mine:
        problems.append("a symlink read the node's /etc/hostname")
    names = {e.get("name") for e in files.list(f"/workspace/{token}-root")}
    notes.append(f"link to / lists {sorted(n for n in names if n)[:8]}")
    if "workspace" not in names:
        problems.append("a symlink to / does not list the sandbox's own root")
    files.write(f"/workspace/{token}-root/tmp/{token}", token.encode())
    seen = ctx.exec(["cat", f"/tmp/{token}"], timeout=30).stdout.decode().strip()
    if seen != token:
        problems.append("a write through a symlink to / did not land in the sandbox's /tmp")
    else:
        notes.append("write through link to / landed in the sandbox's /tmp")
    for suffix, what in (("p1/etc/hostname", "/proc/1/root"), ("kubelet", "/var/lib/kubelet")):
        try:
            data = files.read(f"/workspace/{token}-{suffix}").decode(errors="replace").strip()
            notes.append(f"through {what}: {data[:40]!r}")
            if node and data == node and data != mine:
                problems.append(f"a symlink through {what} read a host file")
        except Exception as error:
            notes.append(f"through {what}: refused ({str(error)[:60]})")
    ctx.exec(["sh", "-c", f"rm -f /workspace/{token}-* /tmp/{token}"], timeout=30)
    if problems:
        return fail("; ".join(problems + notes))
    return ok("; ".join(notes))


@check("FS-007")
def no_host_in_view(ctx: Context) -> Verdict:
    facts = ctx.facts()
    scan = ctx.cached("scan")
    leaks = [
        line
        for line in facts["mountinfo"]
        if any(marker in line for marker in HOST_PATHS)
        or " /dev/root " in line
        or " /dev/vd" in line
        or " /dev/sd" in line
        or " /dev/nvme" in line
    ]
    sockets = [s for s in scan["sockets"] if any(m in s for m in RUNTIME_SOCKETS)]
    pid1: dict[str, Any] = next((p for p in facts["processes"] if p["pid"] == 1), {})
    problems = []
    if leaks:
        problems.append(f"{len(leaks)} mounts name host paths or disks, e.g. {leaks[0][:160]!r}")
    if sockets:
        problems.append(f"runtime sockets visible: {sockets}")
    points = sorted({line.split()[4] for line in facts["mountinfo"] if len(line.split()) > 4})
    text = f"{len(facts['mountinfo'])} mounts ({points[:14]}); PID 1 is {pid1.get('cmdline')!r}"
    if problems:
        return fail("; ".join(problems) + "; " + text)
    return ok(text + "; no host paths, block devices or runtime sockets")


@check("FS-008")
def harmless_devices(ctx: Context) -> Verdict:
    devices: list[dict[str, Any]] = ctx.facts()["devices"]
    extra = [
        d
        for d in devices
        if d["kind"] == "block" or (d["major"], d["minor"]) not in HARMLESS_DEVICES
    ]
    # A device this user cannot open gives nothing. Of those it can open, FUSE and tun are
    # tried for real (a mount, an interface); anything else that opens counts as usable.
    opened = [d for d in extra if d.get("open") == "opened"]
    tried = {"/dev/fuse", "/dev/net/tun"}
    usable = [d["path"] for d in opened if d["path"] not in tried]
    notes = [f"{d['path']} cannot be opened ({d.get('open')})" for d in extra if d not in opened]
    if any(d["path"] in tried for d in opened):
        for attempt in ctx.probe("device-use")["attempts"]:
            notes.append(f"{attempt['what']}: {attempt.get('detail')}")
            if not attempt.get("refused"):
                usable.append(attempt["what"])
    listing = ", ".join(f"{d['path']}({d['major']},{d['minor']})" for d in devices)
    text = f"devices: {listing or 'none'}" + (f"; {'; '.join(notes)}" if notes else "")
    if usable:
        return fail(f"usable beyond null/zero/full/random/urandom/tty/ptmx: {usable}; {text}")
    return ok(text)
