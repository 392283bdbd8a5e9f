"""kind against the embedded cluster: Sandbox create→Ready and exec `true` p50 on each, in
the same run (alternating which cluster goes first), and the operator's failovers on
kind: the Lease holder's process killed, and the Lease holder's node lost.

Needs the three-node kind cluster (`make kind-up`); run it alone, under the embedded
cluster's lock: `flock /tmp/openblox-cluster.lock .venv/bin/python -m bench --only kind`.
Each failover is measured once per run (a node loss takes minutes): the figures are
single values, and the notes say what each bound is.
"""

from __future__ import annotations

import time
from typing import Any

from bench import env
from bench.results import Section
from openblox.client import Client

TITLES = {"kind": "kind (3 nodes) vs the embedded cluster: create, exec, and operator failover"}
KIND_KUBECONFIG = "/var/lib/openblox/kind/openblox.kubeconfig"


def _namespace(kubeconfig: str, name: str) -> None:
    from tests.cluster.kubectl import Kube
    from tests.cluster.sandboxes import opt_in

    kube = Kube(kubeconfig)
    kube.kubectl("create", "namespace", name, check=False)
    kube.kubectl("label", "namespace", name, "openblox.sh/bench=true", "--overwrite")
    opt_in(kube, name)


def _drop_namespace(kubeconfig: str, name: str) -> None:
    from tests.cluster.kubectl import Kube

    Kube(kubeconfig).kubectl("delete", "namespace", name, "--wait=false", check=False)


def _create_and_exec(
    ctx: Any, kubeconfigs: dict[str, str], creates: int, execs: int
) -> dict[str, dict[str, list[float]]]:
    found: dict[str, dict[str, list[float]]] = {n: {"create": [], "exec": []} for n in kubeconfigs}
    clients = {}
    for name, kubeconfig in kubeconfigs.items():
        namespace = f"obx-bench-kind-{name}-{ctx.run_id}"
        _namespace(kubeconfig, namespace)
        ctx.cleanup(_drop_namespace, kubeconfig, namespace)
        clients[name] = Client(namespace, kubeconfig=kubeconfig)
    order = list(kubeconfigs)
    for index in range(creates):
        for name in order if index % 2 == 0 else order[::-1]:
            started = time.monotonic()
            sandbox = clients[name].create("code-exec", name=f"c{index}", timeout=300)
            found[name]["create"].append((time.monotonic() - started) * 1000)
            sandbox.delete()
    held = {name: clients[name].create("code-exec", name="exec", timeout=300) for name in order}
    for sandbox in held.values():
        sandbox.exec(["true"])  # the first exec opens the connection
    for index in range(execs):
        for name in order if index % 2 == 0 else order[::-1]:
            started = time.monotonic()
            result = held[name].exec(["true"])
            found[name]["exec"].append((time.monotonic() - started) * 1000)
            if result.exit_code != 0:
                raise RuntimeError(f"true exited {result.exit_code} on {name}")
    for sandbox in held.values():
        sandbox.delete()
    return found


def _failovers(ctx: Any, section: Section) -> None:
    from tests.cluster.kubectl import Kube
    from tests.cluster.sandboxes import (
        get_sandbox,
        opted_in_namespace,
        ready_condition,
        sandbox,
        wait_for,
        wait_reason,
    )
    from tests.cluster.test_operator_failover import _holder, _two_replicas_one_holder
    from tests.kind.failover import (
        control_plane,
        gvisor_worker,
        leader_on,
        lost,
        node_container,
        nodes,
        sigkill_container,
    )
    from tests.kind.test_kind_failover import _ready_on

    kube = Kube(KIND_KUBECONFIG)

    def changed_from(old: str) -> Any:
        def probe() -> str | None:
            pod, identity = _holder(kube)
            return pod if identity and identity != old else None

        return probe

    with opted_in_namespace(kube, "obx-bench-kind-failover") as namespace:
        holder, _ = _two_replicas_one_holder(kube)
        where = {holder: kube.get("pod", holder, "openblox-system")["spec"]["nodeName"]}
        old = _holder(kube)[1]
        killed = time.monotonic()
        sigkill_container(where[holder], node_container(where[holder], "operator", holder))
        kube.apply(sandbox("after-kill", namespace))
        wait_for("a new holder", changed_from(old), 60, 0.2)
        taken = time.monotonic() - killed
        wait_reason(kube, "after-kill", namespace, "Ready", 180)
        reconciled = time.monotonic() - killed
        section.figure(
            "kind.failover.kill.lease", "holder's process SIGKILLed → Lease taken", "s", value=taken
        )
        section.figure(
            "kind.failover.kill.ready",
            "holder's process SIGKILLed → a Sandbox created at the kill is Ready",
            "s",
            value=reconciled,
        )

        worker, plane = gvisor_worker(kube), control_plane(kube)
        plain = [n["metadata"]["name"] for n in nodes(kube)]
        plain = [n for n in plain if n not in (worker, plane)]
        _two_replicas_one_holder(kube)
        leader_on(kube, worker)
        old = _holder(kube)[1]
        lost_pod = _ready_on(kube, "on-lost-node", namespace, worker, plane, *plain)
        with lost(kube, worker) as frozen:
            wait_for("the standby to take over", changed_from(old), 90, 0.2)
            takeover = time.monotonic() - frozen

            def reason() -> str:
                body = get_sandbox(kube, "on-lost-node", namespace) or {}
                return str(ready_condition(body).get("reason") or "")

            wait_for("NodeLost", lambda: reason() == "NodeLost", 180, 0.5)
            reported = time.monotonic() - frozen

            def replaced() -> bool:
                body = get_sandbox(kube, "on-lost-node", namespace) or {}
                pod = (body.get("status") or {}).get("podName")
                if ready_condition(body).get("reason") != "Ready" or not pod:
                    return False
                current = kube.get("pod", pod, namespace)["metadata"]["uid"]
                return bool(current != lost_pod["metadata"]["uid"])

            wait_for("a new pod Ready", replaced, 300, 0.5)
            again = time.monotonic() - frozen
        for key, title, value in (
            ("kind.failover.node.lease", "holder's node frozen → Lease taken", takeover),
            ("kind.failover.node.reported", "→ its Sandbox says NodeLost", reported),
            ("kind.failover.node.ready", "→ its Sandbox Ready on a new pod elsewhere", again),
        ):
            section.figure(key, title, "s", value=value)


def run(ctx: Any, section: Section) -> None:
    env.use_test_helpers()
    kubeconfigs = {"embedded": env.KUBECONFIG, "kind": KIND_KUBECONFIG}
    found = _create_and_exec(ctx, kubeconfigs, ctx.n(10, 2), ctx.n(100, 5))
    for what, title in (("create", "create→Ready (client.create)"), ("exec", "exec `true`")):
        section.figure(
            f"kind.{what}.kind",
            f"{title}: kind, 3 nodes",
            "ms",
            found["kind"][what],
            baseline=f"kind.{what}.embedded",
            headline=what == "create",
        )
        section.figure(
            f"kind.{what}.embedded", f"{title}: the embedded cluster", "ms", found["embedded"][what]
        )
    _failovers(ctx, section)
    section.notes.append(
        "Create and exec alternate between the clusters (which goes first flips each "
        "round), code-exec profile, one Sandbox at a time; both clusters run on the same "
        "2 cores. Failovers once each on kind: the holder's process SIGKILLed in its node "
        "(bound: the 15 s Lease plus a 2 s renewal, 19 s), and the holder's node frozen "
        "with `docker pause` (the Lease bound again; the Sandbox on it says NodeLost after "
        "the controller manager's node-monitor-grace-period, 50 s by default, and gets a "
        "new pod 10 s (toleration) + 15 s (release) + a pod start later)."
    )
