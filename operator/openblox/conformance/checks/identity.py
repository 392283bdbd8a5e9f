"""Identity and privilege: an ordinary user with nothing extra, and privileged calls refused."""

from __future__ import annotations

import functools
import re
from typing import Any

from openblox.conformance.checks.registry import check
from openblox.conformance.context import Context, Verdict, fail, ok

CAP_SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
SERVICE_ENV = re.compile(r"^(KUBERNETES_|.*_SERVICE_(HOST|PORT)(_|$)|.*_PORT_\d+_(TCP|UDP|SCTP))")


def all_refused(ctx: Context, op: str) -> Verdict:
    attempts: list[dict[str, Any]] = ctx.probe("priv", {"op": op})["attempts"]
    allowed = [a for a in attempts if not a.get("refused")]
    text = "; ".join(f"{a['what']}: {a.get('detail')}" for a in attempts)
    if allowed:
        return fail(f"allowed: {[a['what'] for a in allowed]}. {text}")
    return ok(f"refused: {text}")


@check("IDN-001")
def not_root(ctx: Context) -> Verdict:
    facts = ctx.facts()
    uids, gids, groups = facts["resuid"], facts["resgid"], facts["groups"]
    text = f"uid (real, effective, saved) {uids}, gid {gids}, groups {groups}"
    want_uid, want_gid = ctx.settings.uid, ctx.settings.gid
    if 0 in uids or 0 in gids or 0 in groups:
        return fail(f"root inside: {text}")
    if set(uids) != {want_uid} or set(gids) != {want_gid}:
        return fail(f"expected {want_uid}:{want_gid}: {text}")
    return ok(text)


@check("IDN-002")
def no_capabilities(ctx: Context) -> Verdict:
    status = ctx.facts()["status"]
    sets = {name: status.get(name, "?") for name in CAP_SETS}
    nonzero = {k: v for k, v in sets.items() if v == "?" or int(v, 16) != 0}
    text = ", ".join(f"{k} {v}" for k, v in sets.items())
    return fail(f"capabilities left: {text}") if nonzero else ok(text)


@check("IDN-003")
def no_new_privs(ctx: Context) -> Verdict:
    status = ctx.facts()["status"]
    text = f"NoNewPrivs {status.get('NoNewPrivs')}, Seccomp {status.get('Seccomp')}"
    return ok(text) if status.get("NoNewPrivs") == "1" else fail(text)


@check("IDN-004")
def setuid_does_not_escalate(ctx: Context) -> Verdict:
    found = ctx.cached("scan")["setuid"]
    nnp = ctx.facts()["status"].get("NoNewPrivs") == "1"
    escalating = [f for f in found if f["uid"] == 0]
    setuid_calls = ctx.probe("priv", {"op": "setuid"})["attempts"]
    granted = [a for a in setuid_calls if not a.get("refused")]
    text = (
        f"{len(found)} setuid/setgid files ({[f['path'] for f in found][:8]}); "
        f"no_new_privs {'set: the kernel ignores setuid bits' if nnp else 'NOT set'}; "
        + "; ".join(f"{a['what']}: {a.get('detail')}" for a in setuid_calls)
    )
    if granted or (escalating and not nnp):
        return fail(text)
    return ok(text)


@check("IDN-005")
def no_service_account_token(ctx: Context) -> Verdict:
    tokens = ctx.cached("scan")["tokens"]
    if tokens:
        return fail(f"ServiceAccount credentials readable inside: {tokens}")
    return ok(
        "no file holding a JWT or under a serviceaccount directory anywhere in the filesystem"
    )


@check("IDN-006")
def no_service_env(ctx: Context) -> Verdict:
    facts = ctx.facts()
    keys = set(facts["environ_keys"]) | set(facts["pid1_environ_keys"] or [])
    values: dict[str, str] = facts.get("environ_service") or {}
    named = sorted(k for k in keys if SERVICE_ENV.match(k))
    # A variable set to "" (as an override) names nothing; one with a value leaks it.
    leaked = [k for k in named if values.get(k, "?")]
    if leaked:
        shown = {k: values.get(k, "(in PID 1's environment)") for k in leaked[:4]}
        return fail(f"service addresses in the environment: {leaked[:10]} e.g. {shown}")
    note = f" ({len(named)} set empty)" if named else ""
    return ok(f"environment of the command and of PID 1: {sorted(keys - set(named))}{note}")


# Properties that hold when every attempt of one `priv` probe operation is refused.
REFUSED_OPERATIONS = {
    "IDN-007": "mount",
    "IDN-008": "unshare",
    "IDN-009": "ptrace",
    "IDN-010": "raw",
    "IDN-011": "sysctl",
    "IDN-012": "clock",
    "IDN-013": "module",
}
for _property_id, _op in REFUSED_OPERATIONS.items():
    check(_property_id)(functools.partial(all_refused, op=_op))
