"""Network: loopback only. Every target is a canary the suite started (or the API server).

Each blocked-path verdict needs the same target reachable from an ordinary pod (the
control); otherwise the property cannot tell "blocked" from "broken" and fails saying so.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from openblox.conformance.canaries import NET, Canaries
from openblox.conformance.checks.registry import check
from openblox.conformance.context import CannotRun, Context, Verdict, fail, ok


def sandbox_ip(ctx: Context) -> str | None:
    pod = ctx.pod()
    return ((pod or {}).get("status") or {}).get("podIP")


def _try_targets(ctx: Context, targets: list[dict[str, Any]]) -> tuple[list[str], str]:
    """Try each target from inside the sandbox: the ids of those that answered, and what
    each attempt gave."""
    results = ctx.probe("net", {"timeout": 3, "targets": targets})["results"]
    answered = [r["id"] for r in results if r.get("ok")]
    return answered, "; ".join(f"{r['id']}: {r.get('detail')}" for r in results)


def blocked(ctx: Context, keys: list[str], *, what: str) -> Verdict:
    """Probe each target from inside; all must fail, and the canaries must record nothing."""
    canaries = ctx.canaries()
    targets = canaries.targets()
    chosen = {k: targets[k] for k in keys if k in targets}
    controlled = {k: v for k, v in chosen.items() if canaries.control_ok(k)}
    if not controlled:
        raise CannotRun(
            f"no {what} target is reachable even from an ordinary pod, so a block proves "
            f"nothing ({canaries.control_summary(list(chosen))})"
        )
    token = ctx.token()
    reached, details = _try_targets(
        ctx, [{"id": k, "token": token, **v} for k, v in controlled.items()]
    )
    recorded = canaries.hits_from(token, sandbox_ip(ctx)) if what != "API server" else []
    skipped = sorted(set(chosen) - set(controlled))
    note = f" (not probed, unreachable from an ordinary pod too: {skipped})" if skipped else ""
    if reached or recorded:
        return fail(
            f"reached {reached}; canary recorded {len(recorded)} hits "
            f"from the sandbox; {details}{note}"
        )
    return ok(f"{details}; same targets reachable from an ordinary pod{note}")


@check("NET-001")
def only_loopback(ctx: Context) -> Verdict:
    facts = ctx.facts()
    names = set(facts["addresses"]) | set(facts["proc_net_dev"])
    others = sorted(names - {"lo"})
    if others:
        return fail(f"interfaces besides lo: {others} (addresses {facts['addresses']})")
    if "lo" not in names:
        return ok("no interface at all (not even lo)")
    return ok(f"only lo ({facts['addresses'].get('lo')})")


@check("NET-002")
def loopback_works(ctx: Context) -> Verdict:
    result = ctx.probe("loopback")
    ipv4, ipv6 = result.get("ipv4", {}), result.get("ipv6", {})
    text = f"127.0.0.1: {ipv4}; ::1: {ipv6}"
    return ok(text) if ipv4.get("ok") else fail(text)


@check("NET-003")
def no_tcp_to_pods(ctx: Context) -> Verdict:
    return blocked(ctx, ["canary-pod:80", "metadata-pod:80"], what="pod")


@check("NET-004")
def no_tcp_to_services(ctx: Context) -> Verdict:
    return blocked(ctx, ["canary-service:80"], what="Service")


@check("NET-005")
def no_tcp_to_node(ctx: Context) -> Verdict:
    canaries = ctx.canaries()
    a = canaries.addresses
    keys = [f"node:{a.node_port}"]
    if not canaries.control_ok(keys[0]):
        # No hostPort on this node: the API server's endpoint on the node's address.
        keys = [f"api-endpoint {ip}:{port}" for ip, port in a.api_endpoints if ip == a.node]
    return blocked(ctx, keys, what="node")


@check("NET-006")
def no_dns(ctx: Context) -> Verdict:
    canaries = ctx.canaries()
    a = canaries.addresses
    control = canaries.controls.get("canary-pod:53/udp") or {}
    if not (control.get("ok") and control.get("recorded")):
        raise CannotRun(f"the canary DNS server does not answer an ordinary pod: {control}")
    token = ctx.token()
    targets: list[dict[str, Any]] = [
        {"id": f"resolve {name}", "kind": "resolve", "name": name}
        for name in (
            a.net_service_name,
            f"canary.{canaries.namespace}",
            "kubernetes.default.svc.cluster.local",
            f"{token}.conformance.openblox.invalid",
        )
    ]
    for key in ("canary-pod:53/udp", "canary-service:53/udp", "canary-pod:53/tcp"):
        if key in canaries.targets():
            targets.append({"id": key, "token": token, **canaries.targets()[key]})
    answered, details = _try_targets(ctx, targets)
    recorded = canaries.hits_from(token, sandbox_ip(ctx))
    if answered or recorded:
        return fail(
            f"answered: {answered}; the canary DNS server recorded "
            f"{len(recorded)} queries from the sandbox; {details}"
        )
    return ok(f"{details}; the canary DNS server recorded nothing from the sandbox")


@check("NET-007")
def no_api_server(ctx: Context) -> Verdict:
    canaries = ctx.canaries()
    keys = [k for k in canaries.targets() if k.startswith("api-")]
    if not keys:
        raise CannotRun(f"could not learn the API server's addresses: {canaries.problems}")
    return blocked(ctx, keys, what="API server")


@check("NET-008")
def no_metadata_endpoint(ctx: Context) -> Verdict:
    return blocked(ctx, ["metadata-pod:80", "metadata-service:80"], what="metadata")


@check("NET-009")
def nothing_connects_in(ctx: Context) -> Verdict:
    canaries = ctx.canaries()
    address = sandbox_ip(ctx)
    if not address:
        return ok("the sandbox has no address another pod could connect to")
    port = 18080
    listened: dict[str, Any] = {}

    def listen() -> None:
        try:
            listened.update(ctx.probe("listen", {"port": port, "seconds": 9}, timeout=40))
        except CannotRun as error:
            listened["error"] = str(error)

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    time.sleep(3)
    token = ctx.token()
    from_outside = _probe_inbound(canaries, address, port, token)
    thread.join(40)
    if "error" in listened:
        raise CannotRun(f"the listener inside did not run: {listened['error']}")
    accepted = listened.get("accepted") or []
    if from_outside.get("ok") or accepted:
        return fail(
            f"an ordinary pod connected to {address}:{port}: {from_outside.get('detail')}; "
            f"the listener accepted {accepted}"
        )
    return ok(
        f"listener on 0.0.0.0:{port} inside "
        f"({'listening' if listened.get('listening') else listened}); "
        f"connect from an ordinary pod to the sandbox pod's {address}:{port}: "
        f"{from_outside.get('detail')}"
    )


def _probe_inbound(canaries: Canaries, address: str, port: int, token: str) -> dict[str, Any]:
    results = canaries.probe_from(
        NET, {"sandbox": {"kind": "tcp", "host": address, "port": port}}, token
    )
    return results.get("sandbox", {})
