"""Targets the suite starts itself, so no probe ever aims at anything it did not set up.

In a namespace of its own, on the sandbox's node (by node affinity, so the scheduler
waits for room rather than the kubelet refusing a pod that names the node):

- ``canary-net``: an HTTP server on TCP 80 and a DNS server on UDP and TCP 53 that
  records everything it receives; its port 80 is also published on the node as a
  hostPort (no hostNetwork), which is how "TCP to the node" is probed. Behind the
  ``canary`` Service.
- ``canary-metadata``: stands in for a cloud metadata endpoint (HTTP on 80, fake
  credentials); behind the ``metadata`` Service. It is also the *control* client: before
  any sandbox probe counts, the same probe is run from here and must get through, so a
  "blocked" verdict can never come from a broken canary.
- ``canary-host``: hostPID and hostIPC; a process whose command line carries a token and
  a SysV shared-memory segment with a known key. A sandbox that can see either shares the
  host's PID or IPC namespace.

The only addresses probed that the suite did not start are the API server's (its Service
and endpoint), which NET-007 is about. Never a public address, never 169.254.169.254.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from openblox.conformance.cluster_api import PART_OF, Kube, PodEnded
from openblox.guest import CANARY, PROBE, source
from openblox.transport import ApiError, is_conflict, path

CONTAINER = "canary"
NET, METADATA, HOST = "canary-net", "canary-metadata", "canary-host"


@dataclass
class Addresses:
    net_pod: str = ""
    net_service: str = ""
    net_service_name: str = ""
    metadata_pod: str = ""
    metadata_service: str = ""
    node: str = ""
    node_port: int = 0
    api_service: tuple[str, int] | None = None
    api_endpoints: list[tuple[str, int]] = field(default_factory=list)
    host_token: str = ""
    shm_key: int = 0


class CanaryError(Exception):
    pass


class Canaries:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        *,
        image: str,
        pull_policy: str,
        node_name: str | None,
        node_ip: str | None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.image = image
        self.pull_policy = pull_policy
        self.node_name = node_name
        self.addresses = Addresses(node=node_ip or "")
        self.controls: dict[str, dict[str, Any]] = {}
        self.problems: list[str] = []
        self.notes: list[str] = []
        """What happened on the way that did not stop the canaries (shown in the scorecard)."""
        self._bodies: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------------ start

    def start(self, timeout: float = 120.0) -> None:
        a = self.addresses
        a.host_token = f"openblox-canary-{secrets.token_hex(6)}"
        a.shm_key = 0x0B10C000 + secrets.randbelow(0xFFF)
        a.node_port = 20000 + secrets.randbelow(9000)
        canary = source(CANARY)
        self._pod(NET, ["python3", "-c", canary, "net", "tcp:80,udp:53,tcp:53"], host_port=True)
        self._pod(METADATA, ["python3", "-c", canary, "metadata", "tcp:80"])
        self._pod(
            HOST,
            ["python3", "-c", canary, "host", a.host_token, str(a.shm_key)],
            host_namespaces=True,
        )
        self._service(
            "canary",
            NET,
            [("http", 80, "TCP"), ("dns", 53, "UDP"), ("dns-tcp", 53, "TCP")],
        )
        self._service("metadata", METADATA, [("http", 80, "TCP")])
        deadline = time.monotonic() + timeout
        pods = {}
        for name in (NET, METADATA, HOST):
            try:
                pods[name] = self._wait(name, deadline)
            except (TimeoutError, RuntimeError) as error:
                self.problems.append(f"{name}: {error}")
        if NET not in pods or METADATA not in pods:
            raise CanaryError("; ".join(self.problems))
        a.net_pod = pods[NET]["status"]["podIP"]
        a.metadata_pod = pods[METADATA]["status"]["podIP"]
        a.net_service = self._service_ip("canary")
        a.metadata_service = self._service_ip("metadata")
        a.net_service_name = f"canary.{self.namespace}.svc.cluster.local"
        if not a.node:
            a.node = pods[NET]["status"].get("hostIP", "")
        self._find_api_server()
        self._run_controls()

    def _wait(self, name: str, deadline: float) -> dict[str, Any]:
        """The canary once Ready. The scheduler and the kubelet count a pod that is still
        shutting down differently, so a bound pod can be refused by the kubelet for want of
        room the scheduler already gave back; that refusal is recreated, at most twice, and
        noted in the scorecard. Any other end of the pod is reported as it happened."""
        for attempt in range(3):
            try:
                return self.kube.wait_pod(
                    self.namespace, name, max(5.0, deadline - time.monotonic())
                )
            except PodEnded as ended:
                if not ended.rejected_at_admission or attempt == 2:
                    raise
                self.notes.append(f"{name} recreated: {ended}")
                self.kube.delete_pod_now(self.namespace, name)
                self._await_gone(name, deadline)
                self._create(self._bodies[name])
        raise AssertionError("unreachable")  # pragma: no cover

    def _await_gone(self, name: str, deadline: float) -> None:
        while time.monotonic() < deadline and self.kube.read_pod(self.namespace, name):
            time.sleep(0.5)

    def _pod(
        self,
        name: str,
        command: list[str],
        *,
        host_port: bool = False,
        host_namespaces: bool = False,
    ) -> None:
        container: dict[str, Any] = {
            "name": CONTAINER,
            "image": self.image,
            "imagePullPolicy": self.pull_policy,
            "command": command,
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            # No CPU limit: canary-net's single-core speed is the CPU baseline (RES-004).
            "resources": {
                "requests": {"cpu": "10m", "memory": "32Mi"},
                "limits": {"memory": "128Mi"},
            },
            # Every canary is Ready once it serves: the listeners once they listen, the
            # host canary once its shared-memory segment exists.
            "readinessProbe": {"exec": {"command": ["test", "-e", "/tmp/hits.jsonl"]}},
        }
        if host_port:
            container["ports"] = [
                {"containerPort": 80, "hostPort": self.addresses.node_port, "protocol": "TCP"}
            ]
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                # Ports below 1024 without any capability.
                "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]
            }
            if not host_namespaces
            else {},
            "containers": [{k: v for k, v in container.items() if v is not None}],
        }
        if host_namespaces:
            spec["hostPID"] = True
            spec["hostIPC"] = True
        if self.node_name:
            # Through the scheduler, not spec.nodeName: a pod named onto a node skips the
            # scheduler, and the kubelet fails it at once (OutOfcpu) when the node's requests
            # are full for a moment, e.g. while an earlier test's sandboxes shut down. The
            # scheduler waits for room instead and says what is short.
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": [self.node_name],
                                    }
                                ]
                            }
                        ]
                    }
                }
            }
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {**PART_OF, "app.kubernetes.io/name": name},
            },
            "spec": spec,
        }
        self._bodies[name] = body
        self._create(body)

    def _create(self, body: dict[str, Any]) -> None:
        try:
            self.kube.api.post(path(plural="pods", namespace=self.namespace), body)
        except ApiError as error:
            if not is_conflict(error):
                raise

    def _service(self, name: str, selector: str, ports: list[tuple[str, int, str]]) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": self.namespace, "labels": dict(PART_OF)},
            "spec": {
                "selector": {"app.kubernetes.io/name": selector},
                "ports": [
                    {"name": n, "port": p, "targetPort": p, "protocol": proto}
                    for n, p, proto in ports
                ],
            },
        }
        try:
            self.kube.api.post(path(plural="services", namespace=self.namespace), body)
        except ApiError as error:
            if not is_conflict(error):
                raise

    def _service_ip(self, name: str) -> str:
        service = self.kube.api.get(path(plural="services", namespace=self.namespace, name=name))
        return str(service["spec"].get("clusterIP"))

    def _find_api_server(self) -> None:
        a = self.addresses
        try:
            service = self.kube.api.get(
                path(plural="services", namespace="default", name="kubernetes")
            )
            spec = service["spec"]
            a.api_service = (str(spec.get("clusterIP")), int(spec["ports"][0]["port"]))
        except ApiError as error:
            self.problems.append(f"cannot read the kubernetes Service: {error.status}")
        try:
            slices = self.kube.api.get(
                path(
                    group="discovery.k8s.io",
                    plural="endpointslices",
                    namespace="default",
                ),
                labelSelector="kubernetes.io/service-name=kubernetes",
            )["items"]
            for endpoint_slice in slices:
                ports = endpoint_slice.get("ports")
                port = int(ports[0]["port"]) if ports else 443
                for endpoint in endpoint_slice.get("endpoints") or []:
                    a.api_endpoints.extend((ip, port) for ip in endpoint["addresses"])
        except ApiError as error:
            self.problems.append(f"cannot read the API server's endpoints: {error.status}")

    # ------------------------------------------------------------------ controls

    def targets(self) -> dict[str, dict[str, Any]]:
        """Every network target, keyed by id; the sandbox and the control probe the same."""
        a = self.addresses
        found: dict[str, dict[str, Any]] = {
            "canary-pod:80": {"kind": "tcp", "host": a.net_pod, "port": 80},
            "canary-service:80": {"kind": "tcp", "host": a.net_service, "port": 80},
            "canary-pod:53/udp": {"kind": "udp-dns", "host": a.net_pod, "port": 53},
            "canary-service:53/udp": {"kind": "udp-dns", "host": a.net_service, "port": 53},
            "canary-pod:53/tcp": {"kind": "tcp-dns", "host": a.net_pod, "port": 53},
            "metadata-pod:80": {"kind": "tcp", "host": a.metadata_pod, "port": 80},
            "metadata-service:80": {"kind": "tcp", "host": a.metadata_service, "port": 80},
        }
        if a.node:
            found[f"node:{a.node_port}"] = {"kind": "tcp", "host": a.node, "port": a.node_port}
        if a.api_service:
            found["api-service"] = {
                "kind": "tcp",
                "host": a.api_service[0],
                "port": a.api_service[1],
            }
        for ip, port in a.api_endpoints:
            found[f"api-endpoint {ip}:{port}"] = {"kind": "tcp", "host": ip, "port": port}
        return found

    def _run_controls(self, patience: float = 30.0) -> None:
        """Probe every target from an ordinary pod; Service rules can take a few seconds to
        appear on the node, so retry what failed for a while."""
        targets = self.targets()
        token = f"control-{secrets.token_hex(4)}"
        deadline = time.monotonic() + patience
        while True:
            pending = {k: v for k, v in targets.items() if not self.control_ok(k)}
            from_metadata = {k: v for k, v in pending.items() if not k.startswith("metadata")}
            from_net = {k: v for k, v in pending.items() if k.startswith("metadata")}
            for pod, chosen in ((METADATA, from_metadata), (NET, from_net)):
                if chosen:
                    self.controls.update(self.probe_from(pod, chosen, token))
            if all(self.control_ok(k) for k in targets) or time.monotonic() > deadline:
                break
            time.sleep(2)
        hits = self.hits(NET)
        for key in ("canary-pod:53/udp", "canary-service:53/udp", "canary-pod:80"):
            if key in self.controls:
                self.controls[key]["recorded"] = any(token in h.get("data", "") for h in hits)

    def probe_from(
        self, pod: str, targets: dict[str, dict[str, Any]], token: str
    ) -> dict[str, dict[str, Any]]:
        config = {
            "timeout": 3,
            "targets": [{"id": k, "token": token, **v} for k, v in targets.items()],
        }
        outcome = self.kube.exec(
            self.namespace,
            pod,
            CONTAINER,
            ["python3", "-c", source(PROBE), "net", json.dumps(config)],
            timeout=30,
        )
        try:
            parsed = json.loads(outcome.stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError) as error:
            raise CanaryError(
                f"control probe from {pod} gave no result: {outcome.error or ''} "
                f"{outcome.stderr.decode('utf-8', 'replace')[-300:]}"
            ) from error
        return {r["id"]: r for r in parsed["results"]}

    def control_ok(self, key: str) -> bool:
        result = self.controls.get(key)
        return bool(result and result.get("ok"))

    def control_summary(self, keys: list[str]) -> str:
        parts = []
        for key in keys:
            result = self.controls.get(key) or {}
            parts.append(f"{key} {'reachable' if result.get('ok') else 'NOT reachable'}")
        return "control pod: " + ", ".join(parts)

    # ------------------------------------------------------------------ observation

    def hits(self, pod: str = NET) -> list[dict[str, Any]]:
        outcome = self.kube.exec(
            self.namespace, pod, CONTAINER, ["cat", "/tmp/hits.jsonl"], timeout=20
        )
        if outcome.exit_code != 0:
            raise CanaryError(f"cannot read {pod}'s record: {outcome.error or outcome.stderr!r}")
        hits = []
        for line in outcome.stdout.decode("utf-8", "replace").splitlines():
            try:
                hits.append(json.loads(line))
            except ValueError:
                continue
        return hits

    def hits_from(self, token: str, peer: str | None, pod: str = NET) -> list[dict[str, Any]]:
        return [
            h
            for h in self.hits(pod)
            if token in h.get("data", "") or (peer and h.get("peer") == peer)
        ]

    def run_in(self, pod: str, argv: list[str], timeout: float = 60) -> bytes:
        outcome = self.kube.exec(self.namespace, pod, CONTAINER, argv, timeout=timeout)
        if outcome.exit_code != 0:
            raise CanaryError(
                f"{pod}: {' '.join(argv[:2])} failed: {outcome.error or ''} "
                f"{outcome.stderr.decode('utf-8', 'replace')[-300:]}"
            )
        return outcome.stdout
