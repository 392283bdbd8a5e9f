"""Where things are on the node, and small helpers to run the tools the baselines use."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "docs" / "benchmarks"
NODE_BIN = Path("/var/lib/openblox/bin")
KUBECONFIG = os.environ.get("KUBECONFIG") or "/var/lib/openblox/cluster/admin.kubeconfig"
CRI_ENDPOINT = "unix:///run/openblox/containerd/containerd.sock"
SANDBOX_IMAGE = "openblox.local/sandbox:0.1.0"
OPERATOR_NAMESPACE = "openblox-system"
OPERATOR_SERVICE_ACCOUNT = "openblox-operator"
# State the benchmark keeps outside the repository (the private dockerd, its wrapper).
BENCH_STATE = Path("/var/lib/openblox-bench")
BENCH_RUN = Path("/run/openblox-bench")


def use_test_helpers() -> None:
    """Let a section import the cluster tests' helpers (`tests.cluster`, `tests.kind`):
    they import `embedded` from cluster/, which the tests' conftest puts on the path."""
    for folder in (str(REPO), str(REPO / "cluster")):
        if folder not in sys.path:
            sys.path.insert(0, folder)


def pinned_sandbox_image() -> str:
    """The sandbox image by digest, as profiles name it: this tree's last build, or
    OPENBLOX_BENCH_SANDBOX_IMAGE where set (the image the cluster was installed with,
    when the shared build cache has since built another one for another cluster)."""
    override = os.environ.get("OPENBLOX_BENCH_SANDBOX_IMAGE")
    if override:
        return override
    use_test_helpers()
    import install_images

    digest = install_images.built_digest(install_images.SANDBOX_IMAGE, install_images.DEFAULT_CACHE)
    return install_images.pinned(install_images.SANDBOX_IMAGE, digest).reference


def tool(name: str) -> str:
    """The node's copy of a tool (kubectl, crictl, runsc) when there is one, else PATH's."""
    candidate = NODE_BIN / name
    if candidate.exists():
        return str(candidate)
    return shutil.which(name) or name


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    timeout: float = 120,
    stdin: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(
        list(argv), check=False, capture_output=True, timeout=timeout, input=stdin
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:6])} failed ({result.returncode}): "
            f"{result.stderr.decode(errors='replace').strip()[-800:]}"
        )
    return result


def kubectl_argv(*args: str) -> list[str]:
    return [tool("kubectl"), "--kubeconfig", KUBECONFIG, *args]


def kubectl(
    *args: str, check: bool = True, timeout: float = 120, stdin: bytes | None = None
) -> str:
    return run(kubectl_argv(*args), check=check, timeout=timeout, stdin=stdin).stdout.decode()


def crictl_argv(*args: str) -> list[str]:
    return [tool("crictl"), "--runtime-endpoint", CRI_ENDPOINT, *args]


def crictl_json(command: str, *args: str) -> Any:
    """`crictl COMMAND -o json ARGS...` (flags must come before positional arguments)."""
    return json.loads(run(crictl_argv(command, "-o", "json", *args), timeout=60).stdout or b"{}")


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    values: dict[str, int] = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[key] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    return values


def _first(pattern: str, text: str) -> str | None:
    match = re.search(pattern, text, re.MULTILINE)
    return match.group(1).strip() if match else None


def machine() -> dict[str, Any]:
    lscpu = ""
    with contextlib.suppress(OSError):
        lscpu = run(["lscpu"], check=False).stdout.decode()
    memory = meminfo()
    os_release = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "cpu_model": _first(r"^Model name:\s*(.+)$", lscpu),
        "hypervisor": _first(r"^Hypervisor vendor:\s*(.+)$", lscpu),
        "kernel": platform.release(),
        "os": _first(r'^PRETTY_NAME="?([^"\n]+)"?', os_release),
        "memory_total_gib": round(memory.get("MemTotal", 0) / 2**30, 2),
        "memory_available_gib": round(memory.get("MemAvailable", 0) / 2**30, 2),
        "swap_total_gib": round(memory.get("SwapTotal", 0) / 2**30, 2),
        "python": platform.python_version(),
        "hostname": platform.node(),
    }
    for name, argv in {
        "kubernetes": kubectl_argv("version", "-o", "json"),
        "runsc": [tool("runsc"), "--version"],
        "containerd": [tool("containerd"), "--version"],
    }.items():
        try:
            out = run(argv, check=False, timeout=20).stdout.decode()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if name == "kubernetes":
            with contextlib.suppress(ValueError, KeyError):
                info["kubernetes"] = json.loads(out)["serverVersion"]["gitVersion"]
        else:
            info[name] = out.strip().splitlines()[0] if out.strip() else None
    runsc_target = Path(tool("runsc"))
    if runsc_target.is_symlink():
        info["runsc_build"] = runsc_target.resolve().parent.name
    return info


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
