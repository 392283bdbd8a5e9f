"""Runs the sections in order, records the machine and its load, writes the results."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from bench import env, report
from bench.results import Run, Section, machine_line
from bench.sections import (
    async_client,
    async_exec,
    chaos,
    client_library,
    cluster_up,
    create,
    density,
    exec_latency,
    files,
    jobs,
    kind,
    mcp_latency,
    operator_cost,
    pool,
    preview,
    scale,
    scaling,
    syscalls,
)

# Order of a full run: the cheap and quiet first, the ones that fill the node last.
SECTIONS: dict[str, ModuleType] = {
    "syscalls": syscalls,
    "create": create,
    "pool": pool,
    "exec": exec_latency,
    "client-library": client_library,
    "async-stack": async_client,
    "async-exec": async_exec,
    "files": files,
    "preview": preview,
    "mcp": mcp_latency,
    "jobs": jobs,
    "operator": operator_cost,
    "density": density,
    "memory": scaling,
    "scaling": scaling,
    "cluster-up": cluster_up,
    "kind": kind,
    "scale": scale,
    "chaos": chaos,
}
# Run only when asked for by name: cluster-up restarts the cluster everyone else is
# using, kind builds a cluster of its own, and scale fills the API server with 10,000
# Sandboxes for up to 25 minutes, and chaos breaks the kind cluster's parts on purpose.
EXPLICIT_ONLY = {"cluster-up", "kind", "scale", "chaos"}


@dataclass
class Context:
    """What sections share: the run's options, the cluster, and cleanups for the end."""

    quick: bool
    run: Run
    args: argparse.Namespace
    run_id: str
    selected: list[str]
    cleanups: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    shared: dict[str, Any] = field(default_factory=dict)
    _kube: Any = None

    @property
    def kube(self) -> Any:
        if self._kube is None:
            from bench.cluster_side import Kube

            self._kube = Kube()
        return self._kube

    def cleanup(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Runs function at the end of the run; a failure there is noted, not raised."""

        def safely() -> None:
            try:
                function(*args, **kwargs)
            except Exception as error:
                note = f"cleanup {getattr(function, '__name__', function)} failed: {error}"
                note_on_sections_run(self.run, self.selected, note[:300])
                self.log(note)

        self.cleanups.callback(safely)

    def n(self, full: int, quick: int) -> int:
        """An iteration count: the full one, or the smoke test's."""
        return quick if self.quick else full

    def seconds(self, full: float, quick: float) -> float:
        return quick if self.quick else full

    def log(self, message: str) -> None:
        elapsed = time.monotonic() - self.run.t0
        print(f"[bench {elapsed:7.1f}s] {message}", file=sys.stderr, flush=True)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    print(f"[bench] received {name}; cleaning up", file=sys.stderr, flush=True)
    raise KeyboardInterrupt(name)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny iteration counts (smoke test)")
    parser.add_argument(
        "--only",
        default="",
        help=f"comma-separated sections: {', '.join(SECTIONS)} "
        "(cluster-up runs only when named here)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results directory (default docs/benchmarks, or docs/benchmarks/quick with --quick)",
    )
    parser.add_argument(
        "--scale-max",
        type=int,
        default=200,
        help="live sandboxes the scaling section aims for (default 200)",
    )
    parser.add_argument(
        "--density-max",
        type=int,
        default=50,
        help="idle code-exec Sandboxes the density section aims for (default 50)",
    )
    parser.add_argument(
        "--reserve-cpu",
        type=int,
        default=510,
        help="millicores of CPU requests the scaling ramp leaves free for other users of the "
        "node (default 510: one code-exec sandbox)",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="cluster-up: also time a cold `up` with an empty build cache (hours on 2 cores)",
    )
    parser.add_argument(
        "--async-per-sandbox",
        type=int,
        default=25,
        help="async-exec: concurrent execs per code-exec sandbox; the 200 are spread over "
        "as many sandboxes as that takes, and the node must have room for them (default 25)",
    )
    parser.add_argument(
        "--no-agent-sandbox",
        action="store_true",
        help="pool: leave out the agent-sandbox baseline (built from the Go module proxy)",
    )
    parser.add_argument(
        "--pool-sizes",
        default="20,5",
        help="pool: the pool sizes of the sustained runs, comma-separated (default 20,5)",
    )
    parser.add_argument(
        "--scale-sandboxes",
        type=int,
        default=10_000,
        help="scale: Sandboxes on the simulated nodes (default 10000)",
    )
    parser.add_argument(
        "--scale-nodes", type=int, default=100, help="scale: simulated nodes (default 100)"
    )
    parser.add_argument(
        "--scale-namespaces",
        type=int,
        default=100,
        help="scale: namespaces the Sandboxes and the pools are spread over (default 100)",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="only redraw results.md and the plots from results.json",
    )
    parser.add_argument(
        "--cleanup",
        action="store_true",
        help="only remove what an interrupted run left (namespaces, FlowSchemas, profiles, "
        "agent-sandbox's controller and CRDs)",
    )
    return parser.parse_args(argv)


def _select(args: argparse.Namespace) -> list[str]:
    if not args.only:
        return [name for name in SECTIONS if name not in EXPLICIT_ONLY]
    wanted = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in SECTIONS]
    if unknown:
        raise SystemExit(f"unknown section(s): {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    return [name for name in SECTIONS if name in wanted]


def _previous(out: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        return {}
    return data


@contextlib.contextmanager
def _timed(ctx: Context, sections: list[Section]) -> Iterator[None]:
    started = time.monotonic()
    for section in sections:
        section.started = env.now_iso()
        section.load_before = env.loadavg()
        section.status = "running"
        section.error = None
        section.machine = machine_line(ctx.run.machine)
        ctx.log(f"section {section.name}: load {section.load_before}")
    try:
        yield
        for section in sections:
            section.status = "ok" if section.status == "running" else section.status
    except KeyboardInterrupt:
        for section in sections:
            section.status = "interrupted"
            section.error = "interrupted"
        raise
    except Exception as error:
        text = "".join(traceback.format_exception(error))[-4000:]
        for section in sections:
            section.status = "failed"
            section.error = text
        ctx.log(f"section(s) {', '.join(s.name for s in sections)} failed: {error!r}")
    finally:
        for section in sections:
            section.seconds = round(time.monotonic() - started, 1)
            section.load_after = env.loadavg()
            ctx.log(f"section {section.name}: {section.status} in {section.seconds}s")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    selected = _select(args)
    out: Path = args.out or (env.RESULTS_DIR / "quick" if args.quick else env.RESULTS_DIR)
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)

    from bench.cluster_side import run_id

    if args.cleanup:
        from bench import agent_sandbox, kwok
        from bench import docker as docker_mod
        from bench.cluster_side import Kube, clean_leftovers

        notes: list[str] = []
        clean_leftovers(Kube(), notes)
        agent_sandbox.remove_leftovers(notes)
        kwok.stop_leftover(notes)
        removed = kwok.remove_nodes(Kube())
        if removed:
            notes.append(f"deleted {removed} simulated nodes an interrupted run left")
        docker = docker_mod.Docker()
        if docker._answers():
            docker.remove_all()
        print("\n".join(notes) or "nothing left over", file=sys.stderr)
        return 0

    if args.report_only:
        previous = _previous(out)
        run = Run(quick=bool(previous.get("quick")), machine=previous.get("machine") or {})
        run.started = previous.get("started") or run.started
        run.notes = previous.get("notes") or []
        run.sections.update(kept_sections(previous, []))
        run.finished, run.seconds = previous.get("finished"), previous.get("seconds")
        report.write(run, out, plots=not args.no_plots)
        return 0

    run = Run(quick=args.quick, machine=env.machine())
    ctx = Context(args.quick, run, args, run_id(), selected)
    ctx.log(f"sections: {', '.join(selected)}; results to {out}")
    if args.only:
        # A partial run updates the sections it ran and keeps the rest of the last results,
        # each with its own notes; the last run's own notes (an interruption, a cleanup that
        # failed) were about that run, so they are not carried into this one.
        run.sections.update(kept_sections(_previous(out), selected))

    def write() -> None:
        run.finished = env.now_iso()
        run.seconds = round(time.monotonic() - run.t0, 1)
        report.write(run, out, plots=not args.no_plots)

    interrupted = False
    done: set[Callable[..., Any]] = set()
    try:
        with ctx.cleanups:
            for name in selected:
                module = SECTIONS[name]
                for section_name in getattr(module, "PRODUCES", [name]):
                    run.sections.setdefault(
                        section_name, Section(section_name, module.TITLES[section_name])
                    )
                if module.run in done:
                    continue  # one module serves two names (memory and scaling share a ramp)
                done.add(module.run)
                sections = [
                    run.sections[n] for n in getattr(module, "PRODUCES", [name]) if n in selected
                ]
                with _timed(ctx, sections):
                    problem = (
                        _cluster_problem(ctx) if getattr(module, "NEEDS_CLUSTER", True) else None
                    )
                    if problem:
                        for section in sections:
                            section.status = "skipped"
                            section.error = problem
                        ctx.log(f"skipping {', '.join(s.name for s in sections)}: {problem}")
                    else:
                        module.run(ctx, *sections)
                write()
    except KeyboardInterrupt as error:
        interrupted = True
        note_on_sections_run(
            run,
            selected,
            f"the run was interrupted ({error or 'SIGINT'}); sections not marked ok are incomplete",
        )
    finally:
        write()
    ctx.log(f"wrote {out / 'results.md'}")
    return 130 if interrupted else 0


def note_on_sections_run(run: Run, selected: list[str], note: str) -> None:
    """A note about this run: on the run, and on each of its sections, so it stays with
    them when a later partial run keeps them and drops this run's own notes."""
    run.notes.append(note)
    for name in selected:
        section = run.sections.get(name)
        if section is not None and note not in section.notes:
            section.notes.append(note)


def _cluster_problem(ctx: Context) -> str | None:
    from bench.cluster_side import cluster_ready

    try:
        return cluster_ready(ctx.kube)
    except Exception as error:
        return f"cannot reach the cluster: {error}"


def kept_sections(previous: dict[str, Any], selected: list[str]) -> dict[str, Section]:
    """The last results' sections a partial run does not run again, with their notes."""
    return {
        name: _section_from(data, previous)
        for name, data in (previous.get("sections") or {}).items()
        if name not in selected
    }


def _section_from(data: dict[str, Any], previous: dict[str, Any]) -> Section:
    from bench.results import Figure

    section = Section(data["name"], data["title"])
    for key in (
        "notes",
        "tables",
        "plots",
        "series",
        "status",
        "error",
        "started",
        "seconds",
        "load_before",
        "load_after",
        "machine",
    ):
        setattr(section, key, data.get(key, getattr(section, key)))
    if not section.machine and previous.get("machine"):
        # Results from before sections named their machine ran on the run's one.
        section.machine = machine_line(previous["machine"])
    for figure in data.get("figures", []):
        section.figures.append(
            Figure(
                figure["key"],
                figure["title"],
                figure["unit"],
                figure.get("samples") or [],
                figure.get("value"),
                figure.get("baseline"),
                figure.get("floor"),
                figure.get("higher_is_better", False),
                figure.get("notes", ""),
                figure.get("extra") or {},
            )
        )
    return section
