"""A thin, honest wrapper over kubectl for tests: what a person would type."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from typing import Any

import yaml

from embedded import kubectl


@dataclass(frozen=True)
class Kube:
    kubeconfig: str

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 120, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return kubectl(self.kubeconfig, *args, check=check, timeout=timeout, stdin=stdin)

    def apply(
        self, manifest: dict[str, Any] | str, *extra: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
        return self.kubectl("apply", "-f", "-", *extra, stdin=text, check=check)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        ns = ["-n", namespace] if namespace else []
        result: dict[str, Any] = json.loads(
            self.kubectl("get", kind, name, *ns, "-o", "json").stdout
        )
        return result

    def wait_pod(
        self, name: str, namespace: str, phase: str = "Running", timeout: float = 120
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        pod: dict[str, Any] = {}
        while time.monotonic() < deadline:
            pod = self.get("pod", name, namespace)
            if pod.get("status", {}).get("phase") == phase:
                return pod
            time.sleep(0.5)
        raise AssertionError(
            f"pod {namespace}/{name} not {phase} in {timeout}s: "
            f"{json.dumps(pod.get('status'), indent=1)}"
        )

    def exec(
        self,
        pod: str,
        namespace: str,
        *argv: str,
        container: str | None = None,
        check: bool = False,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        target = ["-c", container] if container else []
        return self.kubectl(
            "exec", "-n", namespace, pod, *target, "--", *argv, check=check, timeout=timeout
        )

    def events(self, namespace: str, involved: str) -> list[dict[str, Any]]:
        out = self.kubectl(
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            f"involvedObject.name={involved}",
            "-o",
            "json",
        )
        items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
        return items
