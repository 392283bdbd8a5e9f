"""agent-sandbox's side of the pool section: its controller, CRDs, namespace, template
and pools, and its claims, timed the way openblox's are (from the create call until a
watch shows the claim Ready=True). The pool section alternates the two systems, one
scenario at a time, each with the other's pool empty.

Its pod is openblox's pool pod for the same profile (`build_pool_pod` on the profile as
installed), less what only openblox's node plugin reads (bench/agent_sandbox_objects.py).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from bench import agent_sandbox, env
from bench import agent_sandbox_objects as objects
from bench.claims import Claim
from bench.cluster_side import POOL_PROFILE, Kube, delete_namespace, make_namespace
from openblox.builders.pod import build_pool_pod
from openblox.models.pool import Pool
from openblox.models.profile_parsing import parse_profile
from openblox.names import PROFILES_CONFIGMAP
from openblox.transport import ApiError, NotFound

TEMPLATE = "bench-pool"
WARM_POOL = "bench-pool"
# Claims on a pool of no pods: each one a cold create from the same template.
COLD_POOL = "bench-cold"
READY_TIMEOUT = 180.0
CONTROLLER_ROLE = "agent-sandbox controller"


def openblox_pool_pod(kube: Kube, namespace: str) -> dict[str, Any]:
    """The pod openblox's keeper makes for the bench's pool profile, as installed."""
    data = kube.get(f"/api/v1/namespaces/{env.OPERATOR_NAMESPACE}/configmaps/{PROFILES_CONFIGMAP}")
    profile = parse_profile(POOL_PROFILE, data["data"][POOL_PROFILE])
    pool = Pool(WARM_POOL, POOL_PROFILE, (namespace,), 1)
    return build_pool_pod(pool, namespace, profile, "template")


class AgentSandbox:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.kube: Kube = ctx.kube
        self.namespace = f"obx-bench-as-{ctx.run_id}"
        self.controller: agent_sandbox.Controller | None = None
        self.image = ""
        self.template: dict[str, Any] = {}
        self.given: dict[str, str] = {}
        """Claim name → the Sandbox (and pod) it was given."""

    # ----------------------------------------------------------------- set up, tear down

    def start(self) -> None:
        """Builds (or finds cached) and starts everything; each step's undoing is
        registered first, so an interrupted or failed run removes what it made."""
        self.ctx.log("agent-sandbox: building its controller (cached after the first run)")
        binary = agent_sandbox.build()
        self.ctx.cleanup(agent_sandbox.remove_crds)
        agent_sandbox.install_crds()
        self.controller = agent_sandbox.Controller(binary, self.ctx.run_id)
        self.ctx.cleanup(self.controller.stop)
        self.controller.start_controller()
        # Not opted in to openblox: its operator leaves this namespace alone.
        make_namespace(self.kube, self.namespace, sandboxes=False)
        self.ctx.cleanup(delete_namespace, self.kube, self.namespace, wait=180)
        self.kube.request(
            "POST",
            f"/apis/networking.k8s.io/v1/namespaces/{self.namespace}/networkpolicies",
            objects.deny_all_policy(self.namespace),
        )
        template = objects.pod_template(openblox_pool_pod(self.kube, self.namespace))
        self.image = str(template["spec"]["containers"][0]["image"])
        self.template = template
        self._create(
            "sandboxtemplates", objects.sandbox_template(TEMPLATE, self.namespace, template)
        )
        self._create("sandboxwarmpools", objects.warm_pool(COLD_POOL, self.namespace, TEMPLATE, 0))
        self._create("sandboxwarmpools", objects.warm_pool(WARM_POOL, self.namespace, TEMPLATE, 0))

    def _create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.kube.request("POST", objects.extensions_path(self.namespace, plural), body)

    @property
    def pid(self) -> int | None:
        return self.controller.pid if self.controller else None

    # ----------------------------------------------------------------- the pool

    def set_pool(self, size: int) -> None:
        self.kube.request(
            "PATCH",
            objects.extensions_path(self.namespace, "sandboxwarmpools", WARM_POOL),
            {"spec": {"replicas": size}},
            content_type="application/merge-patch+json",
        )

    def warm(self) -> int:
        return objects.ready_replicas(
            self.kube.get(objects.extensions_path(self.namespace, "sandboxwarmpools", WARM_POOL))
        )

    def wait_warm(self, count: int, timeout: float = 300) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.warm() >= count:
                return time.monotonic() - started
            time.sleep(1)
        raise TimeoutError(f"agent-sandbox's pool did not reach {count} ready in {timeout:.0f}s")

    def _pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.kube.get(f"/api/v1/namespaces/{self.namespace}/pods")[
            "items"
        ]
        return items

    def drain(self, timeout: float = 180) -> None:
        """Empties the pool and waits until no pod of the namespace is left."""
        self.set_pool(0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._pods():
            time.sleep(1)

    def pod_check(self) -> str:
        """Whether a pod it made is the template's pod, read back from the API server."""
        pods = self._pods()
        if not pods:
            return "agent-sandbox's pods were not checked: none was there"
        found = objects.differences(self.template, pods[0])
        name = pods[0]["metadata"]["name"]
        if not found:
            return (
                f"agent-sandbox's pod {name}, read back: runtimeClassName, securityContext, "
                "token, service links, DNS, volumes, image, command, env, resources and mounts "
                "as in openblox's pool pod"
            )
        return f"agent-sandbox's pod {name} differs from openblox's pool pod in: " + ", ".join(
            found
        )

    # ----------------------------------------------------------------- claims

    def claim(self, name: str, offset: float) -> Claim:
        return self._claim(name, offset, WARM_POOL)

    def cold_claim(self, name: str, offset: float) -> Claim:
        return self._claim(name, offset, COLD_POOL)

    def _claim(self, name: str, offset: float, pool: str) -> Claim:
        started = time.monotonic()
        try:
            body = self._create("sandboxclaims", objects.claim(name, self.namespace, pool))
            body = self._wait_ready(name, body, started + READY_TIMEOUT)
        except Exception as error:
            return Claim(offset, None, False, f"{name}: {type(error).__name__}: {error}"[:300])
        elapsed = (time.monotonic() - started) * 1000
        sandbox = objects.sandbox_name(body)
        if sandbox:
            self.given[name] = sandbox
        return Claim(offset, elapsed, objects.is_warm(body))

    def _wait_ready(self, name: str, body: dict[str, Any], deadline: float) -> dict[str, Any]:
        path = objects.extensions_path(self.namespace, "sandboxclaims")
        while not objects.is_ready(body):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"not Ready in {READY_TIMEOUT:.0f} s")
            version = body["metadata"].get("resourceVersion")
            try:
                for event in self.kube.watch(
                    path,
                    resource_version=version,
                    timeout_seconds=max(int(remaining), 1),
                    fieldSelector=f"metadata.name={name}",
                ):
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        body = event["object"]
                        if objects.is_ready(body):
                            return body
                    elif event.get("type") == "ERROR":
                        break  # too old a version: read it again
            except ApiError:
                pass
            body = self.kube.get(f"{path}/{name}")
        return body

    def delete(self, name: str) -> None:
        with contextlib.suppress(NotFound):
            self.kube.request(
                "DELETE", objects.extensions_path(self.namespace, "sandboxclaims", name)
            )

    def settle(self, names: list[str], timeout: float = 120) -> None:
        """Deletes the claims and waits until the pods they were given are gone."""
        for name in names:
            with contextlib.suppress(Exception):
                self.delete(name)
        gone = {self.given.get(name) for name in names} | set(names)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pods = {p["metadata"]["name"] for p in self._pods()}
            if not pods & gone:
                return
            time.sleep(1)
