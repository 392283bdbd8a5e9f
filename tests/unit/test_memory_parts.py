"""The memory section names each process under a shim by its role and sums PSS per role."""

from bench import memory_parts
from bench.procs import Process

MIB = 2**20


def _table() -> dict[int, Process]:
    processes = [
        Process(10, 1, ["/bin/containerd-shim-runsc-v1", "-id", "abc"]),
        Process(11, 10, ["runsc-sandbox", "--root=/run/runsc", "boot", "--bundle=/b"]),
        Process(12, 11, ["runsc-sandbox", "--root=/run/runsc", "boot", "--bundle=/b"]),
        Process(13, 10, ["runsc-gofer", "--root=/run/runsc", "gofer", "--bundle=/b"]),
        Process(14, 10, ["/bin/runsc", "--root=/run/runsc", "wait", "abc"]),
        Process(15, 1, ["/usr/bin/containerd-shim-runc-v2", "-id", "def"]),
        Process(16, 11, []),
        Process(18, 16, []),
        Process(17, 1, []),
    ]
    return {process.pid: process for process in processes}


def test_each_process_is_named_by_its_role() -> None:
    table = _table()
    roles = {pid: memory_parts.role(process, table) for pid, process in table.items()}

    assert roles == {
        10: "shim (containerd-shim-runsc-v1)",
        11: "Sentry (runsc-sandbox)",
        12: "systrap stubs (children of the Sentry)",
        13: "runsc gofer",
        14: "runsc wait",
        15: "shim (containerd-shim-runc-v2)",
        16: "systrap stubs (children of the Sentry)",
        18: "systrap stubs (children of the Sentry)",
        17: "?",
    }


def test_rows_compare_roles_side_by_side_with_a_total() -> None:
    part = {"processes": 2, "pss": 4 * MIB, "pss_anon": 3 * MIB, "pss_file": MIB, "pss_shmem": 0}
    sandbox = memory_parts.mean([{"runsc wait": part}, {"runsc wait": part}])

    rows = memory_parts.table_rows(sandbox, {})

    assert rows == [
        ["runsc wait", "2.0", "4.0 (3.0 / 1.0 / 0.0)", "-", "-"],
        ["total", "2.0", "4.0 (3.0 / 1.0 / 0.0)", "-", "-"],
    ]
