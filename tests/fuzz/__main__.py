"""`python -m tests.fuzz [--cases N] [--cluster-cases N] [--seed S] [--out docs/fuzzing.md]`:
the larger fuzz run behind docs/fuzzing.md (`make fuzz`), with its seed and machine, so
anyone can run it again. The cluster surfaces run under the shared cluster's lock,
taken here for them only; `--no-cluster` leaves them out and the page says so."""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from tests.fuzz import edges, pure, tenant
from tests.fuzz.oracle import Violation
from tests.fuzz.runner import Surface, Tally, run_surface

# One surface's run: its tally, the operator's crashes during it (None: not a cluster
# surface), and the seconds it took.
SurfaceRun = tuple[Surface, Tally, int | None, float]

REPO = Path(__file__).resolve().parents[2]
LOCK = "/tmp/openblox-cluster.lock"


def machine() -> str:
    model = "unknown CPU"
    with open("/proc/cpuinfo") as cpuinfo:  # noqa: PTH123
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{platform.node()}: {os.cpu_count()} x {model}, {memory:.1f} GiB, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"Hypothesis {metadata.version('hypothesis')}"
    )


def commit() -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def row(surface: Surface, tally: Tally, operator_crashes: int | None, seconds: float) -> str:
    refused = sum(n for k, n in tally.outcomes.items() if "refused" in k)
    crashes = tally.count("crash") + (operator_crashes or 0)
    operator = "n/a" if operator_crashes is None else str(operator_crashes)
    return (
        f"| {surface.name} | {tally.cases} | {tally.cases - refused - len(tally.violations)} "
        f"| {refused} | {crashes} | {operator} | {tally.count('weaker')} "
        f"| {tally.count('unclear')} | {seconds:.0f} |"
    )


def outcomes(surface: Surface, tally: Tally) -> str:
    counted = ", ".join(f"{k}: {n}" for k, n in sorted(tally.outcomes.items()))
    return f"- **{surface.name}**: {surface.what}. {counted}."


def run_cluster(cases: int, seed: int, *, lock: bool) -> list[SurfaceRun]:
    """The cluster surfaces, under the shared cluster's lock (held only for them)."""
    from openblox.conformance.cluster_api import Kube
    from tests.fuzz import cluster

    kube = Kube.connect()
    results: list[SurfaceRun] = []
    with open(LOCK, "a") as handle:  # noqa: PTH123
        if lock:
            fcntl.flock(handle, fcntl.LOCK_EX)
        with cluster.FuzzNamespace(kube).open() as namespace:
            surfaces = (cluster.sandbox_surface(kube, namespace), cluster.profile_surface(kube))
            for surface in surfaces:
                watch = cluster.Operator(kube)
                started = time.monotonic()
                tally = run_surface(surface, cases, seed)
                if isinstance(surface.check, cluster.SandboxSpecs):
                    try:
                        cluster.all_reaped(kube, surface.check)
                    except Violation as late:
                        tally.violations.append(f"{late.kind}: {late.detail}")
                cluster.still_serves(kube, namespace)
                results.append((surface, tally, watch.crashes(), time.monotonic() - started))
    return results


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--cases", type=int, default=2000)
    options.add_argument("--cluster-cases", type=int, default=100)
    options.add_argument("--seed", type=int, default=20261201)
    options.add_argument(
        "--only", choices=("local", "cluster"), help="run one part; the page keeps the other's"
    )
    options.add_argument("--lock-held", action="store_true", help="the caller holds the lock")
    options.add_argument("--out", default=str(REPO / "docs" / "fuzzing.md"))
    args = options.parse_args()
    logging.disable(logging.CRITICAL)
    out = Path(args.out)
    violations: list[str] = []
    if args.only != "cluster":
        local: list[SurfaceRun] = []
        for surface in (*pure.SURFACES, *edges.SURFACES, *tenant.SURFACES):
            # The supervisor runs a process per case: a tenth of the count.
            count = args.cases // 10 if surface is pure.SUPERVISOR else args.cases
            started = time.monotonic()
            tally = run_surface(surface, count, args.seed)
            local.append((surface, tally, None, time.monotonic() - started))
            print(f"{surface.name}: {tally.cases} cases", file=sys.stderr)
        header = (
            f"Seed {args.seed}; {args.cases} cases per surface ({args.cases // 10} for the "
            "supervisor, a process each); "
        )
        write_section(out, "local", header, local)
        violations += [v for _, tally, _, _ in local for v in tally.violations]
    if args.only != "local":
        remote = run_cluster(args.cluster_cases, args.seed, lock=not args.lock_held)
        header = f"Seed {args.seed}; {args.cluster_cases} cases per surface; "
        write_section(out, "cluster", header, remote)
        violations += [v for _, tally, _, _ in remote for v in tally.violations]
        violations += [f"operator restarted {c} times" for _, _, c, _ in remote if c]
    for violation in violations:
        print(violation, file=sys.stderr)
    sys.exit(1 if violations else 0)


TABLE_HEAD = (
    "| surface | cases | accepted | refused | crashes | operator restarts | weaker pods "
    "| unclear refusals | seconds |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
)


def write_section(out: Path, name: str, header: str, results: Sequence[SurfaceRun]) -> None:
    """Replace one generated part of the page, keeping the other."""
    table = "\n".join(row(*result) for result in results)
    detail = "\n".join(outcomes(surface, tally) for surface, tally, _, _ in results)
    found = [v for _, tally, _, _ in results for v in tally.violations]
    body = (
        f"{header}machine: {machine()}; commit {commit()}; "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC.\n\n"
        f"{TABLE_HEAD}{table}\n\n{detail}\n\n"
        + (
            "Violations:\n\n" + "\n".join(f"- `{v[:400]}`" for v in found)
            if found
            else "No violations."
        )
    )
    text = out.read_text() if out.exists() else PAGE
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    before, _, rest = text.partition(begin)
    _, _, after = rest.partition(end)
    out.write_text(f"{before}{begin}\n{body}\n{end}{after}")


PAGE = """# Fuzzing: generated bad input against every surface

Generated by `make fuzz` (`python -m tests.fuzz`; `--only local` or `--only cluster`
regenerates one part); do not edit by hand. The bounded run in `make test` is the same
code at a smaller count: tests/unit/test_fuzz.py and tests/cluster/test_fuzz.py.

A case is *accepted* (handled whole), *refused* (the surface's own typed error, with a
message that passes `tests/fuzz/oracle.py:clear`: not empty, bounded, no traceback or
object repr, naming what it refuses where that is knowable), or a violation: a *crash*
(any other exception, an API server 5xx, a Sandbox the operator did not reconcile within
30 s), a *weaker* pod (`oracle.weaknesses` against the profile, as the operator parses
it), or an *unclear* refusal. *Operator restarts* counts restarts and replaced pods of
the operator during a cluster surface; after each, a good Sandbox must still reach Ready.

## Without a cluster

<!-- local -->
<!-- /local -->

## Through the API server and the operator

In a namespace of the run's own, with a profile `test-fuzz` (the shipped fields at 10m
CPU) added for the run, against the operator installed in the cluster.

<!-- cluster -->
Not run yet: `make fuzz` on a machine with the cluster.
<!-- /cluster -->

## Found while building these fuzzers, and fixed

- An `openblox.sh/last-activity` stamp in year 9999 (any caller allowed to patch its
  Sandbox can write one) overflowed the idle deadline, and the error stopped the
  reaper's pass for every sandbox. The idle deadline is now capped at max age
  (`lifetime/expiry.py`). The Sandbox-bodies surface finds it against the old code.
- A supervisor verdict with only an exit code was accepted by the client's decoder and
  then failed with a KeyError; every field is now checked.
- The client sent non-string argv items, env values and cwd on to the sandbox, and
  failed with TypeError or ValueError on a non-number `grace`, a non-integer `limit`,
  `port` or `ttl`; all are `InvalidArgument` now (`client/arguments.py`).
- The command line ended in a traceback when the API server could not be reached or the
  kubeconfig could not be loaded, and took `nan`, `inf` and negative timeouts; it now
  says what failed and exits 2.
"""


if __name__ == "__main__":
    main()
