"""The pod's seccomp profile refuses at least what the exec supervisor's filter refuses.

The profile (node-agent/sandbox-seccomp.json) is what holds for every process in the pod,
however started; the supervisor's filter stays as a second layer. The two are written
in different languages (OCI JSON, BPF), so this keeps them from drifting apart. Whether
runsc enforces the profile is shown on the cluster (tests/cluster/test_raw_exec.py).
"""

import json
from pathlib import Path
from typing import Any

from openblox.guest import supervisor

PROFILE = Path(__file__).resolve().parents[2] / "node-agent" / "sandbox-seccomp.json"

# x86_64 numbers of the supervisor's table, by name.
X86_64_NAMES = {
    308: "setns",
    165: "mount",
    166: "umount2",
    155: "pivot_root",
    428: "open_tree",
    429: "move_mount",
    430: "fsopen",
    431: "fsconfig",
    432: "fsmount",
    433: "fspick",
    442: "mount_setattr",
    321: "bpf",
    298: "perf_event_open",
    323: "userfaultfd",
    248: "add_key",
    249: "request_key",
    250: "keyctl",
    272: "unshare",
    56: "clone",
}
SECCOMP_FILTER_FLAG_NEW_LISTENER = 8


def _rules() -> list[dict[str, Any]]:
    profile = json.loads(PROFILE.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    rules: list[dict[str, Any]] = profile["syscalls"]
    return rules


def _unconditional(action: str) -> set[str]:
    return {
        name
        for rule in _rules()
        if rule["action"] == action and not rule.get("args")
        for name in rule["names"]
    }


def test_every_syscall_the_supervisor_refuses_is_refused_by_the_profile() -> None:
    _, refused, _, _ = supervisor._X86_64
    assert {X86_64_NAMES[number] for number in refused} <= _unconditional("SCMP_ACT_ERRNO")


def test_clone_and_unshare_are_refused_with_any_namespace_flag() -> None:
    _, _, _, flagged = supervisor._X86_64
    (rule,) = [r for r in _rules() if set(r["names"]) == {X86_64_NAMES[n] for n in flagged}]
    assert rule["action"] == "SCMP_ACT_ERRNO"
    masks = [arg["value"] for arg in rule["args"]]
    # Several conditions on one argument are ORed: one rule per bit catches any of them.
    assert all(arg["index"] == 0 and arg["op"] == "SCMP_CMP_MASKED_EQ" for arg in rule["args"])
    assert all(
        arg["value"] == arg["valueTwo"] and bin(arg["value"]).count("1") == 1
        for arg in rule["args"]
    )
    combined = 0
    for mask in masks:
        combined |= mask
    assert combined == supervisor.NAMESPACE_FLAGS and len(masks) == len(set(masks))


def test_clone3_answers_enosys_and_nothing_can_intercept_that() -> None:
    # SCMP_ACT_TRACE answers ENOSYS when no tracer is attached (runsc ignores errnoRet
    # for SCMP_ACT_ERRNO). A tracer, or a user-notification listener, could let the call
    # through instead, so both ways of becoming one are refused.
    (clone3,) = [r for r in _rules() if r["names"] == ["clone3"]]
    assert clone3["action"] == "SCMP_ACT_TRACE" and clone3["errnoRet"] == supervisor.ENOSYS
    assert "ptrace" in _unconditional("SCMP_ACT_ERRNO")
    (listener,) = [r for r in _rules() if r["names"] == ["seccomp"]]
    assert listener["action"] == "SCMP_ACT_ERRNO"
    assert listener["args"] == [
        {
            "index": 1,
            "value": SECCOMP_FILTER_FLAG_NEW_LISTENER,
            "valueTwo": SECCOMP_FILTER_FLAG_NEW_LISTENER,
            "op": "SCMP_CMP_MASKED_EQ",
        }
    ]
