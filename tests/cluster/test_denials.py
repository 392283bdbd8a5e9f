"""Legible denials on the real cluster: the labelled corpus, scored, and the loop they exist for.

One code-exec sandbox runs the corpus's ordinary entries; entries that may kill their
pod (memory) get a sandbox each, a sandbox left to reach its max age gives the lifetime
record, and a create with an unknown profile gives the admission record. All of it runs
at once, so the module takes about as long as its slowest entry. The scores are written
to docs/denials-accuracy.json; docs/denials.md quotes them.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from openblox.client import AdmissionDenied, Client, Sandbox, SandboxGone
from openblox.client.cluster import sandboxes_path
from openblox.denials import CATEGORIES, SCHEMA, Denial
from openblox.timestamps import parse_timestamp
from tests.cluster.kubectl import Kube
from tests.cluster.sandboxes import opted_in_namespace
from tests.denial_scoring import Scored, accuracy, write_accuracy

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / "denial_corpus" / "corpus.yaml"
ACCURACY = ROOT / "docs" / "denials-accuracy.json"
RECORD_FIELDS = {
    "schema",
    "denied",
    "attempted",
    "because",
    "profile",
    "at",
    "evidence",
    "inferred",
}


@dataclass
class Observed:
    """What the caller was told about one corpus entry."""

    entry: dict[str, Any]
    # What the caller holds: the client's `Denial`s, and the `Denied` Events' records
    # parsed as the client parses them. The status and Events as read stay JSON, in `extra`.
    records: list[Denial] = field(default_factory=list)
    how: str = "exec"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def categories(self) -> set[str]:
        return {record.denied for record in self.records}


def load_corpus() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = yaml.safe_load(CORPUS.read_text())["entries"]
    return entries


@pytest.fixture(scope="module")
def denial_ns(operator: Kube) -> Iterator[str]:
    with opted_in_namespace(operator, "t-denials") as name:
        yield name


@pytest.fixture(scope="module")
def client(operator: Kube, denial_ns: str) -> Client:
    return Client(denial_ns, kubeconfig=operator.kubeconfig)


@pytest.fixture(scope="module")
def shared(client: Client) -> Iterator[Sandbox]:
    sandbox = client.create("code-exec", "corpus")
    yield sandbox
    sandbox.delete()


def _exec(sandbox: Sandbox, entry: dict[str, Any]) -> Observed:
    for path, content in (entry.get("files") or {}).items():
        sandbox.files.write(path, content, 0o644)
    try:
        result = sandbox.exec(entry["argv"], timeout=entry.get("timeout", 20))
    except SandboxGone as gone:
        return Observed(entry, [gone.record] if gone.record else [], "SandboxGone")
    return Observed(entry, list(result.denials), extra={"exit_code": result.exit_code})


def _own_sandbox(client: Client, kube: Kube, entries: list[dict[str, Any]]) -> list[Observed]:
    """Entries that may take the pod down, one after another in a sandbox of their own.

    When one does, the operator's status record and `Denied` Event are collected too,
    and the next entry waits for the replacement pod.
    """
    name = "destructive"
    observed: list[Observed] = []
    sandbox = client.create("code-exec", name)
    try:
        for entry in entries:
            result = _exec(sandbox, entry)
            if result.how == "SandboxGone":
                result.extra["status"] = _wait_status_denials(kube, client.namespace, name)
                result.extra["events"] = _denied_events(kube, client.namespace, name)
                sandbox = client.create("code-exec", name)
            observed.append(result)
        return observed
    finally:
        sandbox.delete()


def _wait_status_denials(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    denials: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        body = kube.get("sandbox", name, namespace)
        denials = list((body.get("status") or {}).get("denials") or [])
        if denials:
            break
        time.sleep(0.5)
    return denials


def _denied_events(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        records = [
            json.loads(event["message"])
            for event in kube.events(namespace, name)
            if event.get("reason") == "Denied"
        ]
        if records:
            return records
        time.sleep(0.5)
    return []


def _reaped(client: Client, kube: Kube, entry: dict[str, Any]) -> Observed:
    """Create a sandbox with a short lifetime, watch it until the reaper deletes it, and
    collect every place the lifetime denial shows: status, Event, the next exec's error."""
    spec = entry.get("spec") or {}
    sandbox = client.create(
        "code-exec",
        entry["id"],
        max_age_seconds=spec.get("maxAgeSeconds"),
        idle_timeout_seconds=spec.get("idleTimeoutSeconds"),
    )
    last_status: list[dict[str, Any]] = []
    stream = client._io.api.watch(
        sandboxes_path(client.namespace),
        resource_version=None,
        timeout_seconds=120,
        fieldSelector=f"metadata.name={sandbox.name}",
    )
    for event in stream:
        body = event["object"]
        last_status = list((body.get("status") or {}).get("denials") or last_status)
        if event["type"] == "DELETED":
            break
    events = _denied_events(kube, client.namespace, sandbox.name)
    # Strictly, as the client reads an Event's record: one that does not parse fails here.
    records = [Denial.from_dict(event) for event in events]
    # The pod goes with its owner, in the background; the next exec finds it gone.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = kube.kubectl("get", "pod", sandbox.pod, "-n", client.namespace, check=False)
        if pods.returncode != 0:
            break
        time.sleep(0.5)
    gone_record = None
    try:
        sandbox.exec(["true"])
    except SandboxGone as gone:
        gone_record = gone.record
    if gone_record:
        records.append(gone_record)
    return Observed(
        entry,
        records,
        "reaped",
        {"status": last_status, "events": events, "exec_error_record": gone_record},
    )


def _refused(client: Client, entry: dict[str, Any]) -> Observed:
    try:
        client.create(entry["profile"], entry["id"])
    except AdmissionDenied as denied:
        return Observed(entry, [denied.record], "AdmissionDenied")
    client.delete(entry["id"])
    return Observed(entry, [], "created")


@pytest.fixture(scope="module")
def corpus_run(operator: Kube, client: Client, shared: Sandbox) -> dict[str, Observed]:
    """Run every entry. At most two sandboxes run at once (the node is small, and other
    tests may be running): the shared one and the destructive one, then the reaped one."""
    entries = load_corpus()
    started = time.monotonic()
    results: dict[str, Observed] = {}
    destructive = [e for e in entries if e.get("sandbox") == "own"]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_own_sandbox, client, operator, destructive)
        for entry in entries:
            if entry.get("kind") == "create":
                results[entry["id"]] = _refused(client, entry)
            elif not entry.get("kind") and entry.get("sandbox") != "own":
                results[entry["id"]] = _exec(shared, entry)
        for observed in pending.result():
            results[observed.entry["id"]] = observed
    for entry in entries:
        if entry.get("kind") == "reap":
            results[entry["id"]] = _reaped(client, operator, entry)
    results["_seconds"] = Observed({"id": "_seconds"}, extra={"s": time.monotonic() - started})
    return results


def score(results: dict[str, Observed]) -> dict[str, Any]:
    """Per-category and overall precision and recall (tests/denial_scoring.py), with what
    this run was."""
    scored = [
        Scored(o.entry["id"], o.entry["expect"], tuple(o.records), o.entry.get("attempted"))
        for key, o in results.items()
        if not key.startswith("_")
    ]
    figures = accuracy(scored)
    return {
        "schema": SCHEMA,
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "corpus": str(CORPUS.relative_to(ROOT)),
        "profile": "code-exec",
        "runtime": "gvisor",
        **{key: figures[key] for key in ("entries", "policy_entries", "ordinary_entries")},
        **{key: figures[key] for key in ("overall", "attempted_extracted", "inferred_share")},
        "seconds": round(results["_seconds"].extra["s"], 1) if "_seconds" in results else None,
        "categories": figures["categories"],
    }


def test_corpus_is_big_enough_and_labelled() -> None:
    entries = load_corpus()
    assert len(entries) >= 40
    assert len({e["id"] for e in entries}) == len(entries)
    labels = {e["expect"] for e in entries}
    assert labels <= {*CATEGORIES, "none"}
    assert set(CATEGORIES) <= labels, f"categories without an entry: {set(CATEGORIES) - labels}"
    ordinary = sum(1 for e in entries if e["expect"] == "none")
    assert 0.3 <= ordinary / len(entries) <= 0.7


def test_corpus_precision_and_recall(corpus_run: dict[str, Observed]) -> None:
    report = score(corpus_run)
    write_accuracy(ACCURACY, report)
    per = report["categories"]
    wrong = {c: p["false"] for c, p in per.items() if p["false_positives"]}
    assert wrong == {}, f"false denials: {wrong}"
    assert report["overall"]["precision"] == 1.0
    assert report["overall"]["recall"] >= 0.9, report["overall"]
    uncovered = [c for c, p in per.items() if not p["true_positives"]]
    assert uncovered == [], f"categories never detected: {uncovered}"


def test_every_record_has_the_documented_shape(corpus_run: dict[str, Observed]) -> None:
    schema = json.loads((ROOT / "docs" / "denials.schema.json").read_text())
    required = set(schema["required"])
    assert required == RECORD_FIELDS
    for key, observed in corpus_run.items():
        for record in observed.records:
            # The shape is the wire record's, what `--json`, a status and an Event carry.
            wire = record.to_dict()
            assert set(wire) == RECORD_FIELDS, (key, wire)
            assert wire["schema"] == SCHEMA
            assert wire["denied"] in CATEGORIES
            assert wire["profile"] in ("code-exec", "no-such-profile")
            assert isinstance(wire["inferred"], bool)
            parse_timestamp(wire["at"])
            # time and output come from the supervisor's verdict, never from guest text.
            if record.denied in ("time", "output", "lifetime", "admission"):
                assert record.inferred is False, record


def test_oom_killed_pod_is_recorded_in_status_and_an_event(
    corpus_run: dict[str, Observed],
) -> None:
    observed = corpus_run["mem-one-big-allocation"]
    assert observed.how == "SandboxGone", observed
    (record,) = observed.records
    assert record.denied == "memory"
    assert record.because == "memory=512Mi"
    assert record.inferred is False
    assert "OOMKilled" in record.evidence
    status = [r for r in observed.extra["status"] if r["denied"] == "memory"]
    events = [r for r in observed.extra["events"] if r["denied"] == "memory"]
    assert status, observed.extra
    assert events, observed.extra
    assert status[0]["evidence"] == record.evidence


def test_reaping_is_a_lifetime_denial_in_status_event_and_the_next_exec(
    corpus_run: dict[str, Observed],
) -> None:
    observed = corpus_run["lifetime-max-age"]
    lifetime = [r for r in observed.extra["events"] if r["denied"] == "lifetime"]
    assert lifetime, observed.extra
    assert lifetime[0]["because"] == "maxAgeSeconds=15"
    assert lifetime[0]["inferred"] is False
    assert any(r["denied"] == "lifetime" for r in observed.extra["status"]), observed.extra
    gone_record = observed.extra["exec_error_record"]
    assert isinstance(gone_record, Denial), observed.extra
    assert gone_record.denied == "lifetime"


FETCH = """\
import sys
import urllib.request

with urllib.request.urlopen(sys.argv[1], timeout=5) as response:
    print(response.read().decode())
"""


def adapt(record: Denial, data_dir: str) -> list[str]:
    """What a model would do with the record: the network is off by policy (not flaky), so
    stop retrying the remote URL and serve the data from inside the sandbox on loopback."""
    assert record.denied == "network" and record.because == "egress=none"
    return [
        "sh",
        "-c",
        f"python3 -m http.server 8000 --bind 127.0.0.1 --directory {data_dir} "
        ">/dev/null 2>&1 & "
        'for i in $(seq 50); do python3 -c "import socket; '
        "socket.create_connection(('127.0.0.1', 8000))\" 2>/dev/null && break; sleep 0.1; done; "
        "python3 /workspace/fetch.py http://127.0.0.1:8000/data.json",
    ]


def test_a_network_denial_leads_to_an_attempt_that_honours_it(shared: Sandbox) -> None:
    shared.files.write("/workspace/fetch.py", FETCH)
    first = shared.exec(["python3", "/workspace/fetch.py", "http://10.96.0.1:443/data.json"])
    assert first.exit_code != 0
    (record,) = first.denials
    assert record.denied == "network"
    assert record.attempted == "10.96.0.1:443"
    assert record.inferred is True

    shared.files.write("/workspace/data.json", '{"answer": 42}')
    second = shared.exec(adapt(record, "/workspace"))
    assert second.exit_code == 0, second.stderr
    assert json.loads(second.stdout) == {"answer": 42}
    assert second.denials == ()
