"""The boundary a pod runs behind, judged from what it reports; an unclear probe decides nothing."""

import pytest

from openblox.models.boundary import classify_boundary

NODE = "6.18.44-fc-v669"
GVISOR_LOG = "[    0.000000] Starting gVisor...\n[    0.1] Creating cloned children...\n"


@pytest.mark.parametrize(
    ("release", "log", "expected"),
    [
        (NODE, "", "none"),  # the host's kernel: runc, whatever the RuntimeClass says
        (NODE + "\n", GVISOR_LOG, "none"),  # a host kernel log cannot be trusted over uname
        ("4.19.0-gvisor", GVISOR_LOG, "gvisor"),
        ("6.1.62", "[    0.000000] Linux version 6.1.62 (kata guest)\n", "kata"),
        ("", GVISOR_LOG, None),  # nothing from uname: the probe was cut short
        ("4.19.0-gvisor", "", "gvisor"),  # the Sentry's release names it
        ("4.4.0", "Linux version 4.4.0-gvisor #1 SMP Sun Jan 10 15:06:54 PST 2016", "gvisor"),
        ("6.1.62", "", None),  # no kernel log: cannot tell another kernel from a cut probe
        ("  ", "  ", None),
    ],
)
def test_classify_boundary(release: str, log: str, expected: str | None) -> None:
    assert classify_boundary(release, log, NODE) == expected


def test_proc_version_names_gvisor_but_never_makes_a_vm_on_its_own() -> None:
    assert classify_boundary("4.4.0", "", NODE, "Linux version 4.4.0 gVisor") == "gvisor"
    # An old gVisor (release 4.4.0) whose log could not be read: undecided, not kata.
    assert classify_boundary("4.4.0", "", NODE, "Linux version 4.4.0 #1 SMP") is None
