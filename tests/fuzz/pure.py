"""The surfaces that need no cluster: profile entries, Sandbox bodies through the pure
core, the supervisor's framing (the client's decoder, and the supervisor itself on this
host), and preview tokens."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import yaml
from hypothesis import strategies as st

from openblox.builders.pod import build_pod
from openblox.client.errors import ExecTransportError
from openblox.client.launch import SUPERVISOR_ARGV
from openblox.client.supervised import OutputChunk, _FrameDecoder
from openblox.lifetime import compute_expiry, effective_lifetime
from openblox.lifetime.reaping import find_expired
from openblox.models import (
    LifetimeTooLong,
    Profile,
    ProfileError,
    SandboxError,
    parse_profile,
    parse_sandbox,
)
from openblox.preview import tokens
from tests.fuzz.oracle import Violation, clear, weaknesses
from tests.fuzz.runner import Surface
from tests.unit.factories import PINNED_IMAGE
from tests.unit.test_pod_security import restricted_violations

# --- generated values -------------------------------------------------------------------

QUANTITY_TEXT = st.from_regex(
    r"[+-]?\d{0,5}(\.\d{0,4})?([eE][+-]?\d{1,4}|Ki|Mi|Gi|Ti|Ei|[numkMGTPE])?", fullmatch=True
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=24),
    QUANTITY_TEXT,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=6,
)

SHIPPED = {
    "image": PINNED_IMAGE,
    "runtimeClassName": "gvisor",
    "resources": {"cpu": "500m", "memory": "512Mi", "scratch": "128Mi", "processes": 256},
    "exec": {"timeoutSeconds": 60, "outputBytes": 1048576},
    "lifetime": {"idleTimeoutSeconds": 900, "maxAgeSeconds": 3600},
}
PROFILE_PATHS = [
    ("image",), ("runtimeClassName",), ("unsafe",), ("command",), ("user",), ("group",),
    ("resources",), ("resources", "cpu"), ("resources", "memory"), ("resources", "scratch"),
    ("resources", "processes"), ("resources", "ephemeralStorage"), ("exec", "timeoutSeconds"),
    ("exec", "outputBytes"), ("lifetime", "idleTimeoutSeconds"), ("lifetime", "maxAgeSeconds"),
    ("namespaces",), ("namespaces", "names"), ("namespaces", "selector"), ("imagePullPolicy",),
    ("securityContext",), ("resources", "gpu"), ("hostNetwork",),
]  # fmt: skip
RAW_YAML = st.sampled_from(
    [
        "image: [unclosed",
        "image: a\nimage: b\n",
        "!!python/object/apply:os.system ['true']",
        "a: &x [*x]",
        "image: x\nresources: &r {cpu: 1}\nexec: *r\n",
        "? [a, b]\n: c\n",
        "image: x\n<<: {user: 0}\n",
        "---\nimage: x\n---\nimage: y\n",
        "\t\x00",
        "image: x\nresources: {cpu: 1e999999999}\n",
    ]
)


def _mutated(document: dict[str, Any], path: tuple[str, ...], value: Any, drop: bool) -> Any:
    mutated = copy.deepcopy(document)
    target = mutated
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    if drop:
        target.pop(path[-1], None)
    else:
        target[path[-1]] = value
    return mutated


PROFILE_DOCUMENTS = st.one_of(
    st.builds(
        lambda path, value, drop: yaml.safe_dump(_mutated(SHIPPED, path, value, drop)),
        st.sampled_from(PROFILE_PATHS),
        VALUES,
        st.booleans(),
    ),
    st.text(max_size=200),
    RAW_YAML,
    VALUES.map(yaml.safe_dump),
)
PROFILE_KEYS = st.one_of(
    st.just("fuzz"), st.from_regex(r"[a-z0-9-]{1,70}", fullmatch=True), st.text(max_size=70)
)

# --- profiles ---------------------------------------------------------------------------

SANDBOX_BODY: dict[str, Any] = {
    "metadata": {
        "name": "fuzz",
        "namespace": "fuzz",
        "uid": "0f4c2a9e-5d1b-4f3a-9c7e-2b8d6e1a3f50",
        "generation": 1,
        "creationTimestamp": "2026-01-02T03:04:05Z",
    },
    "spec": {"profile": "fuzz"},
}


def check_profile(case: tuple[str, str]) -> str:
    key, text = case
    try:
        profile = parse_profile(key, text)
    except ProfileError as error:
        clear(error.message, must_mention=f'profile "{key}" is invalid: ')
        return "refused: ProfileError"
    again = parse_profile(key, yaml.safe_dump(profile.to_dict()))
    if again != profile:
        raise Violation("crash", "the accepted profile does not parse back from to_dict")
    return "accepted" + _pod_of(parse_sandbox(SANDBOX_BODY), profile)


def _pod_of(sandbox: Any, profile: Profile) -> str:
    """Build the pod and judge it; '' when built, or the refusal's name."""
    try:
        pod = build_pod(sandbox, profile, now=sandbox.creation_timestamp)
    except LifetimeTooLong as error:
        clear(error.message, must_mention="may only shorten")
        return ", refused: LifetimeTooLong"
    found = weaknesses(pod, profile)
    if not profile.unsafe:
        found += list(restricted_violations(pod))
    if found:
        raise Violation("weaker", "; ".join(found))
    return ""


PROFILE = Surface(
    "profile entries",
    "ConfigMap key and YAML value -> parse_profile, then build_pod for what is accepted",
    st.tuples(PROFILE_KEYS, PROFILE_DOCUMENTS),
    check_profile,
)

# --- Sandbox bodies through the pure core --------------------------------------------------

TIMESTAMPS = st.one_of(
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ")),
    st.sampled_from(
        ["9999-12-31T23:59:59Z", "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+14:00"]
    ),
    st.text(max_size=30),
)
# Mostly what the CRD lets through (so the core sees many), sometimes anything.
SPEC_FIELD = st.one_of(
    st.none(),
    st.integers(min_value=1, max_value=4000),
    st.integers(min_value=1, max_value=2**63 - 1),
    SCALARS,
)
SANDBOX_BODIES = st.builds(
    lambda profile, idle, age, extra, stamp: {
        **copy.deepcopy(SANDBOX_BODY),
        "metadata": {
            **SANDBOX_BODY["metadata"],
            "annotations": {} if stamp is None else {"openblox.sh/last-activity": stamp},
        },
        "spec": {
            k: v
            for k, v in {
                "profile": profile,
                "idleTimeoutSeconds": idle,
                "maxAgeSeconds": age,
                **extra,
            }.items()
            if v is not None
        },
    },
    st.one_of(st.just("code-exec"), st.just("code-exec"), SCALARS),
    SPEC_FIELD,
    SPEC_FIELD,
    st.dictionaries(
        st.sampled_from(["image", "runtimeClassName", "user", "x"]), VALUES, max_size=2
    ),
    st.one_of(st.none(), TIMESTAMPS),
)
CODE_EXEC = parse_profile("code-exec", yaml.safe_dump(SHIPPED))
NOW = datetime(2026, 1, 2, 4, 0, tzinfo=UTC)


def check_sandbox_body(body: dict[str, Any]) -> str:
    try:
        sandbox = parse_sandbox(body)
    except SandboxError as error:
        clear(error.message, must_mention="Sandbox ")
        return "refused: SandboxError"
    if sandbox.spec.profile != CODE_EXEC.name:
        return "accepted, profile not found"
    built = _pod_of(sandbox, CODE_EXEC)
    if not built:
        # What the reconcile and the reaper compute for it must not raise either.
        compute_expiry(sandbox, effective_lifetime(sandbox, CODE_EXEC), NOW)
    list(find_expired([sandbox], {CODE_EXEC.name: CODE_EXEC}, NOW))
    return "accepted" + built


SANDBOX_CORE = Surface(
    "Sandbox bodies (pure core)",
    "Sandbox JSON -> parse_sandbox, build_pod, expiry and the reaper's pass",
    SANDBOX_BODIES,
    check_sandbox_body,
)

# --- the supervisor's framing, as the client decodes it ----------------------------------

TAG = st.sampled_from([b"O", b"E", b"R", b"S", b"X", b"\x00"])
VERDICT = st.one_of(
    st.builds(
        lambda code, timed, trunc, sig: json.dumps(
            {"exit_code": code, "timed_out": timed, "truncated": trunc, "signal": sig}
        ).encode(),
        st.integers(-(2**40), 2**40),
        st.booleans(),
        st.booleans(),
        st.one_of(st.none(), st.integers(0, 64)),
    ),
    VALUES.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=40),
)


def _frame(tag: bytes, payload: bytes, lie: int | None) -> bytes:
    length = len(payload) if lie is None else lie
    return tag + length.to_bytes(4, "big") + payload


FRAMES = st.builds(
    lambda frames, cuts, cap: (frames, cuts, cap),
    st.lists(
        st.one_of(
            st.builds(_frame, TAG, st.binary(max_size=64), st.none()),
            st.builds(lambda v: _frame(b"R", v, None), VERDICT),
            st.builds(_frame, TAG, st.binary(max_size=8), st.integers(0, 2**32 - 1)),
            st.binary(max_size=12),
        ),
        max_size=8,
    ),
    st.lists(st.integers(1, 50), max_size=6),
    st.integers(0, 200),
)


def check_frames(case: tuple[list[bytes], list[int], int]) -> str:
    frames, cuts, cap = case
    raw = b"".join(frames)
    decoder = _FrameDecoder(cap)
    chunks: list[OutputChunk] = []
    position = 0
    try:
        for cut in [*cuts, len(raw)]:
            chunks.extend(decoder.feed(raw[position : position + cut]))
            position += cut
        chunks.extend(decoder.feed(raw[position:]))
    except ExecTransportError as error:
        clear(str(error), must_mention="supervisor")
        return "refused: ExecTransportError"
    delivered = sum(len(c.data) for c in chunks)
    if delivered > cap or delivered != len(decoder.stdout) + len(decoder.stderr):
        raise Violation("weaker", f"{delivered} bytes delivered past a cap of {cap}")
    verdict = decoder.verdict
    if verdict is not None:
        # What the client reads of a verdict (supervised.py) must all be there.
        int(verdict["exit_code"]), bool(verdict["timed_out"]), bool(verdict["truncated"])
        int(verdict.get("signal") or 0)
    return "accepted" + (", with a verdict" if verdict is not None else "")


FRAMING = Surface(
    "supervisor framing (client decoder)",
    "framed, misframed and random bytes, split at random points -> the client's decoder",
    FRAMES,
    check_frames,
)

# --- the supervisor itself, on this host ---------------------------------------------------

WRITER = (
    "import sys, json\n"
    "for stream, data in json.loads(sys.argv[1]):\n"
    "    out = sys.stdout if stream == 'o' else sys.stderr\n"
    "    out.buffer.write(bytes.fromhex(data)); out.flush()\n"
    "sys.exit(int(sys.argv[2]))\n"
)
WRITES = st.tuples(
    st.lists(st.tuples(st.sampled_from("oe"), st.binary(max_size=3000)), max_size=6),
    st.integers(0, 255),
    st.integers(0, 20000),
    st.dictionaries(
        st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True),
        st.text(max_size=12).filter(lambda v: "\x00" not in v),
        max_size=3,
    ),
)


def check_supervisor(case: tuple[list[tuple[str, bytes]], int, int, dict[str, str]]) -> str:
    writes, code, cap, env = case
    plan = json.dumps([(stream, data.hex()) for stream, data in writes])
    pairs = [f"{key}={value}" for key, value in env.items()]
    argv = [sys.executable, "-c", WRITER, plan, str(code)]
    command = [sys.executable, *SUPERVISOR_ARGV[1:], "run", "30", str(cap), "4096", "", *pairs]
    done = subprocess.run([*command, "--", *argv], capture_output=True, timeout=60, check=False)
    decoder = _FrameDecoder(cap)
    try:
        list(decoder.feed(done.stdout))
    except ExecTransportError as error:
        raise Violation("crash", f"the supervisor's own framing was refused: {error}") from None
    out = b"".join(data for stream, data in writes if stream == "o")
    err = b"".join(data for stream, data in writes if stream == "e")
    verdict = decoder.verdict or {}
    if verdict.get("exit_code") != code:
        raise Violation("crash", f"exit code {verdict.get('exit_code')!r}, not {code}")
    if len(out) + len(err) <= cap and (bytes(decoder.stdout), bytes(decoder.stderr)) != (out, err):
        raise Violation("crash", "the output did not come back byte for byte")
    if len(decoder.stdout) + len(decoder.stderr) > cap:
        raise Violation("weaker", "more output than the cap came back")
    return "accepted, truncated" if verdict.get("truncated") else "accepted"


SUPERVISOR = Surface(
    "supervisor framing (supervisor.py run)",
    "generated output, exit codes, caps and environment -> supervisor.py run, decoded",
    WRITES,
    check_supervisor,
)

# --- preview tokens ------------------------------------------------------------------------

KEYS = {"k1": b"k" * 32}
SIGN_NOW = 1_800_000_000


def _signed_payload(body: bytes) -> str:
    payload = tokens._b64encode(body)
    signed = f"v1.k1.{payload}"
    return f"{signed}.{tokens._b64encode(tokens._mac(KEYS['k1'], signed))}"


GOOD = tokens.sign(tokens.Grant("ns", "sb", "uid", 8080, SIGN_NOW + 60), "k1", KEYS["k1"])
TOKENS = st.one_of(
    st.text(max_size=80),
    st.builds(
        lambda i, c: GOOD[:i] + c + GOOD[i + 1 :],
        st.integers(0, len(GOOD) - 1),
        st.characters(codec="ascii"),
    ),
    VALUES.map(lambda v: _signed_payload(json.dumps(v).encode())),
    st.builds(
        lambda ns, sb, uid, p, exp: _signed_payload(
            json.dumps({"ns": ns, "sb": sb, "uid": uid, "p": p, "exp": exp}).encode()
        ),
        SCALARS,
        SCALARS,
        SCALARS,
        SCALARS,
        st.one_of(SCALARS, st.integers(SIGN_NOW - 10, SIGN_NOW + 10**7)),
    ),
    st.binary(max_size=60).map(_signed_payload),
    st.text(min_size=1000, max_size=1100),
)


def check_token(token: str) -> str:
    try:
        grant = tokens.verify(token, KEYS, now=SIGN_NOW)
    except tokens.TokenError as error:
        clear(error.reason)
        return f"refused: {type(error).__name__}"
    if not (
        1 <= grant.port <= 65535 and SIGN_NOW < grant.expires <= SIGN_NOW + tokens.MAX_TTL_SECONDS
    ):
        raise Violation("weaker", f"a grant outside the rules: {grant}")
    if not all(isinstance(v, str) and v for v in (grant.namespace, grant.sandbox, grant.uid)):
        raise Violation("weaker", f"a grant without a target: {grant}")
    return "accepted"


TOKENS_SURFACE = Surface(
    "preview tokens",
    "random, mutated and validly signed but malformed tokens -> tokens.verify",
    TOKENS,
    check_token,
)

SURFACES = (PROFILE, SANDBOX_CORE, FRAMING, SUPERVISOR, TOKENS_SURFACE)
