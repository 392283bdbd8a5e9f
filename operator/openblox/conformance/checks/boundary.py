"""Boundary: the sandbox does not share the host's kernel or its PID, network, IPC views."""

from __future__ import annotations

import json
from typing import Any

from openblox.conformance.canaries import HOST, NET, Canaries
from openblox.conformance.checks.registry import check
from openblox.conformance.context import CannotRun, Context, Verdict, fail, ok
from openblox.guest import PROBE, source

# Processes that exist only in a host's (or node's) PID namespace.
HOST_PROCESSES = {
    "kubelet",
    "containerd",
    "containerd-shim",
    "containerd-shim-runc-v2",
    "dockerd",
    "kube-apiserver",
    "kube-proxy",
    "kube-router",
    "etcd",
    "systemd",
    "runsc",
    "runsc-sandbox",
    "runsc-gofer",
    "crio",
    "sshd",
}


def node_kernel(ctx: Context) -> tuple[str | None, str]:
    node = ctx.node()
    if node:
        release = (node.get("status") or {}).get("nodeInfo", {}).get("kernelVersion")
        if release:
            return str(release), f"node {node['metadata']['name']} reports kernel {release}"
    canaries = ctx.canaries()
    release = canaries.run_in(NET, ["uname", "-r"]).decode().strip()
    return release, f"a plain pod on the node runs kernel {release}"


def host_facts(ctx: Context) -> dict[str, Any]:
    """What a plain (runc) pod on the same node sees: the host kernel's view."""
    canaries = ctx.canaries()
    output = canaries.run_in(NET, ["python3", "-c", source(PROBE), "facts"])
    result: dict[str, Any] = json.loads(output.decode().strip().splitlines()[-1])
    return result


def _host_canaries(ctx: Context, which: str) -> Canaries:
    """The canaries, once the one in the host's namespaces (`which`) has started."""
    canaries = ctx.canaries()
    if any(p.startswith(HOST) for p in canaries.problems):
        raise CannotRun(f"the {which} canary did not start: {canaries.problems}")
    return canaries


@check("BND-001")
def kernel_is_not_the_hosts(ctx: Context) -> Verdict:
    facts = ctx.facts()
    inside = facts["uname"]["release"]
    version = facts["proc_version"][:120]
    host, how = node_kernel(ctx)
    if not host:
        raise CannotRun("could not learn the node's kernel release")
    if inside.strip() == host.strip():
        return fail(f"the sandbox runs on the node's own kernel {inside} ({how}); {version}")
    return ok(f"inside: kernel {inside} ({version}); {how}")


@check("BND-002")
def no_host_pid_namespace(ctx: Context) -> Verdict:
    canaries = _host_canaries(ctx, "hostPID")
    processes = ctx.facts()["processes"]
    token = canaries.addresses.host_token
    marker = [p for p in processes if token in p["cmdline"]]
    hostish = [p for p in processes if p["comm"] in HOST_PROCESSES]
    listing = ", ".join(f"{p['pid']}:{p['comm']}" for p in processes[:12])
    if marker or hostish:
        seen = marker + hostish
        return fail(
            f"host processes visible: {[(p['pid'], p['comm'], p['cmdline'][:60]) for p in seen]}"
        )
    return ok(
        f"{len(processes)} processes visible ({listing}); the hostPID canary's marker process "
        "and host daemons are not among them"
    )


@check("BND-003")
def no_host_network_namespace(ctx: Context) -> Verdict:
    facts = ctx.facts()
    inside = {ip for ips in facts["addresses"].values() for ip in ips}
    node_ips: set[str] = set()
    node = ctx.node()
    for address in ((node or {}).get("status") or {}).get("addresses") or []:
        if address.get("type") in ("InternalIP", "ExternalIP"):
            node_ips.add(address["address"])
    canaries = ctx.canaries()
    if canaries.addresses.node:
        node_ips.add(canaries.addresses.node)
    if not node_ips:
        raise CannotRun("could not learn the node's addresses")
    interfaces = dict(facts["addresses"])
    leaked = sorted(inside & node_ips)
    if leaked:
        return fail(f"the node's address {leaked} is on an interface inside: {interfaces}")
    return ok(f"interfaces inside: {interfaces}; node addresses {sorted(node_ips)} not among them")


@check("BND-004")
def no_host_ipc_namespace(ctx: Context) -> Verdict:
    canaries = _host_canaries(ctx, "hostIPC")
    key = canaries.addresses.shm_key
    control_out = canaries.run_in(
        HOST, ["python3", "-c", source(PROBE), "shmget", json.dumps({"key": key})]
    )
    control = json.loads(control_out.decode().strip().splitlines()[-1])
    if not control.get("visible"):
        raise CannotRun(f"the canary's segment {key:#x} is missing even on the host: {control}")
    inside = ctx.probe("shmget", {"key": key})
    listed = ctx.facts().get("sysvipc_shm") or ""
    if inside.get("visible") or str(key) in listed:
        return fail(f"the host's SysV segment {key:#x} is visible inside: {inside}")
    return ok(
        f"shmget(key {key:#x}) inside: {inside['detail']}; the hostIPC canary holds it "
        f"({control['detail']})"
    )


@check("BND-005")
def host_kernel_internals_hidden(ctx: Context) -> Verdict:
    facts = ctx.facts()
    host = host_facts(ctx)
    problems, notes = [], []
    inside_modules = facts["modules"]["proc_modules"]
    host_modules = host["modules"]["proc_modules"]
    if inside_modules and host_modules and set(inside_modules) == set(host_modules):
        problems.append(f"/proc/modules lists the host's {len(host_modules)} modules")
    notes.append(
        "/proc/modules: "
        + ("absent" if inside_modules is None else f"{len(inside_modules)} entries")
    )
    inside_sys, host_sys = set(facts["modules"]["sys_module"]), set(host["modules"]["sys_module"])
    if inside_sys and inside_sys == host_sys:
        problems.append(f"/sys/module is the host's ({len(host_sys)} entries)")
    notes.append(f"/sys/module: {len(inside_sys)} entries (host {len(host_sys)})")
    symbols = facts["kallsyms"]
    if symbols.get("readable") and symbols.get("nonzero_addresses"):
        problems.append(f"/proc/kallsyms shows {symbols['nonzero_addresses']} kernel addresses")
    notes.append(
        "/proc/kallsyms: "
        + (
            f"{symbols.get('lines')} lines, addresses zeroed"
            if symbols.get("readable")
            else "absent"
        )
    )
    log = facts["kernel_log"]
    release = host["uname"]["release"]
    if log.get("readable") and release in str(log.get("head", "")):
        problems.append(f"the kernel log is the host's (mentions {release})")
    notes.append(
        "kernel log: "
        + (
            f"readable, starts {str(log.get('head', ''))[:80]!r}"
            if log.get("readable")
            else f"refused ({log.get('detail')})"
        )
    )
    if problems:
        return fail("; ".join(problems + notes))
    return ok("; ".join(notes))
