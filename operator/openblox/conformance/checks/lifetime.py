"""Time and lifetime: commands end at their timeout, sandboxes at their idle time and age."""

from __future__ import annotations

import json
import time

from openblox.conformance.backend import Handle
from openblox.conformance.checks.registry import check
from openblox.conformance.context import CannotRun, Context, Verdict, fail, ok
from openblox.guest import PROBE, source

EXEC_TIMEOUT = 3.0
EXEC_GRACE = 15.0
IDLE_SECONDS = 10
MAX_AGE_SECONDS = 15
# The reaper may act this much after the deadline (its loop, the API, our polling).
REAP_SLACK = 30.0
# A deadline is stamped in whole seconds; allow reaping this much early.
EARLY = 2.0


def _wait_gone(
    ctx: Context, handle: Handle, until: float, *, busy: list[float] | None = None
) -> float | None:
    """Monotonic time at which the sandbox was seen gone, or None. With ``busy``, a command
    runs every two seconds meanwhile (caller activity); the times of those that succeeded
    are appended to it."""
    last_exec = 0.0
    while time.monotonic() < until:
        if not ctx.backend.exists(handle):
            return time.monotonic()
        if busy is not None and time.monotonic() - last_exec >= 2:
            last_exec = time.monotonic()
            if ctx.backend.exec(handle, ["true"], timeout=10).exit_code == 0:
                busy.append(last_exec)
        time.sleep(0.5)
    return None


@check("TIME-001")
def timeout_kills_tree(ctx: Context) -> Verdict:
    marker = ctx.token()
    argv = ["python3", "-c", source(PROBE), "tree", json.dumps({"marker": marker})]
    outcome = ctx.exec(argv, timeout=EXEC_TIMEOUT)
    if outcome.error:
        raise CannotRun(f"the exec broke: {outcome.error}")
    survivors = ctx.probe("survivors", {"marker": marker})["survivors"]
    left = [p for p in survivors if "survivors" not in p["cmdline"]]
    text = (
        f"timeout {EXEC_TIMEOUT:.0f}s: returned after {outcome.duration:.1f}s, timed_out "
        f"{outcome.timed_out}, exit {outcome.exit_code}; child, setsid child and double-forked "
        f"daemon left running: {len(left)}"
    )
    if left:
        ctx.exec(["pkill", "-KILL", "-f", marker], timeout=20)
        return fail(f"{text} ({[p['cmdline'][-40:] for p in left]})")
    if not outcome.timed_out:
        return fail(f"the command was not reported as timed out: {text}")
    if outcome.duration > EXEC_TIMEOUT + EXEC_GRACE:
        return fail(f"the command outlived its timeout by too much: {text}")
    return ok(text)


@check("TIME-002")
def idle_reaping(ctx: Context) -> Verdict:
    # A backend whose commands are not activity (plain pods/exec) is idle from its create.
    by_commands = getattr(ctx.backend, "execs_record_activity", True)
    since = "the last command" if by_commands else "the create (its commands are not activity)"
    created = time.monotonic()
    with ctx.own_sandbox(idle_timeout_seconds=IDLE_SECONDS) as handle:
        first = ctx.backend.exec(handle, ["true"], timeout=30)
        if first.exit_code != 0:
            raise CannotRun(f"a first command failed: {first.error or first.exit_code}")
        active = time.monotonic() if by_commands else created
        gone = _wait_gone(ctx, handle, active + IDLE_SECONDS + REAP_SLACK)
        if gone is None:
            return fail(
                f"idle timeout {IDLE_SECONDS}s: still there {IDLE_SECONDS + REAP_SLACK:.0f}s "
                f"after {since}"
            )
        after = gone - active
        text = f"idle timeout {IDLE_SECONDS}s: reaped {after:.1f}s after {since}"
        if after < IDLE_SECONDS - EARLY:
            return fail(f"reaped too early: {text}")
        return ok(text)


@check("TIME-003")
def max_age_reaping(ctx: Context) -> Verdict:
    started = time.monotonic()
    with ctx.own_sandbox(max_age_seconds=MAX_AGE_SECONDS) as handle:
        ready = time.monotonic() - started
        busy: list[float] = []
        gone = _wait_gone(ctx, handle, started + MAX_AGE_SECONDS + REAP_SLACK, busy=busy)
        if not busy:
            raise CannotRun("no command succeeded in the sandbox, so it was never busy")
        if gone is None:
            return fail(
                f"max age {MAX_AGE_SECONDS}s: still there {MAX_AGE_SECONDS + REAP_SLACK:.0f}s "
                "after creation, with a command every 2s"
            )
        age = gone - started
        text = (
            f"max age {MAX_AGE_SECONDS}s: ready after {ready:.1f}s, then {len(busy)} commands, "
            f"the last {busy[-1] - started:.1f}s in; reaped {age:.1f}s after the create call"
        )
        if age < MAX_AGE_SECONDS - EARLY:
            return fail(f"reaped too early: {text}")
        return ok(text)


@check("TIME-004")
def guest_cannot_extend(ctx: Context) -> Verdict:
    with ctx.own_sandbox(idle_timeout_seconds=IDLE_SECONDS) as handle:
        api = []
        canaries = None
        try:
            canaries = ctx.canaries()
        except CannotRun:
            canaries = None
        if canaries is not None:
            a = canaries.addresses
            if a.api_service:
                api.append({"host": a.api_service[0], "port": a.api_service[1]})
            api.extend({"host": ip, "port": port} for ip, port in a.api_endpoints)
        stamp = "2099-01-01T00:00:00Z"
        config = {"stamp": stamp, "api": api}
        argv = ["python3", "-c", source(PROBE), "extend", json.dumps(config)]
        outcome = ctx.backend.exec(handle, argv, timeout=30)
        if outcome.error or outcome.exit_code != 0:
            raise CannotRun(
                f"the guest's attempts did not run: {outcome.error or outcome.exit_code}"
            )
        active = time.monotonic()
        tried = {}
        lines = outcome.stdout.decode("utf-8", "replace").strip().splitlines()
        if lines:
            try:
                tried = json.loads(lines[-1]).get("tried", {})
            except ValueError:
                tried = {}
        gone = _wait_gone(ctx, handle, active + IDLE_SECONDS + REAP_SLACK)
        written = sorted(k for k, v in tried.items() if v == "written")
        other = {k: v for k, v in tried.items() if v != "written"}
        summary = f"guest wrote future activity stamps to {written}; other attempts: {other}"
        if gone is None:
            return fail(
                f"idle timeout {IDLE_SECONDS}s: the sandbox outlived it by "
                f"{REAP_SLACK:.0f}s after the guest tried to extend it; {summary}"
            )
        return ok(
            f"idle timeout {IDLE_SECONDS}s: reaped {gone - active:.1f}s after the guest's "
            f"attempts; {summary}"
        )


@check("TIME-005")
def killed_init_recovers(ctx: Context) -> Verdict:
    with ctx.own_sandbox() as handle:
        token = ctx.token()
        marked = ctx.backend.exec(
            handle, ["sh", "-c", f"echo {token} > /workspace/{token}"], timeout=30
        )
        if marked.exit_code != 0:
            raise CannotRun(f"could not write a marker file: {marked.error or marked.exit_code}")
        before = ctx.pod(handle)
        argv = ["python3", "-c", source(PROBE), "kill-init"]
        killed = ctx.backend.exec(handle, argv, timeout=20)
        signals = killed.stdout.decode("utf-8", "replace").strip().splitlines()[-1:] or [
            killed.error or "no report"
        ]
        time.sleep(2)
        started = time.monotonic()
        try:
            recovered = ctx.waiting(lambda: ctx.backend.recover(handle, timeout=150))
        except Exception as error:
            return fail(f"init signalled ({signals[0][:120]}); could not get it back: {error}")
        ctx.owned.append(recovered)
        took = time.monotonic() - started
        answer = ctx.backend.exec(recovered, ["cat", f"/workspace/{token}"], timeout=30)
        if answer.error or answer.timed_out:
            return fail(f"recovered sandbox does not run commands: {answer.error}")
        after = ctx.pod(recovered)
        replaced = (
            before is not None
            and after is not None
            and before["metadata"]["uid"] != after["metadata"]["uid"]
        )
        fresh = answer.exit_code != 0
        state = (
            "a fresh pod" if replaced else "the same pod, restarted" if fresh else "init survived"
        )
        return ok(
            f"guest signalled its init ({signals[0][:120]}); usable again {took:.1f}s later "
            f"through create: {state}"
            + ("; files from before are gone" if fresh else "; files from before are still there")
        )
