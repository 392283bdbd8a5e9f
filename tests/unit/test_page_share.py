"""The memory benchmarks divide the sandbox software's pages among the measured only."""

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench import page_share, procs

PAGE = page_share.PAGE


def test_a_page_mapped_only_by_the_measured_is_left_as_the_kernel_counts_it() -> None:
    extra = page_share.regrouped({1: {100}, 2: {100}}, {100: 2})

    assert extra == {1: 0.0, 2: 0.0}


def test_pages_shared_with_processes_outside_are_divided_among_the_measured() -> None:
    # Frame 100 is mapped by the two measured processes and two more; 200 by process 1
    # and three more; 300 by process 2 alone.
    extra = page_share.regrouped({1: {100, 200}, 2: {100, 300}}, {100: 4, 200: 4, 300: 1})

    assert extra[1] == pytest.approx(PAGE / 2 - PAGE / 4 + PAGE - PAGE / 4)
    assert extra[2] == pytest.approx(PAGE / 2 - PAGE / 4)


def test_a_host_count_below_the_measured_count_adds_nothing_negative() -> None:
    # The page was unmapped elsewhere between the two reads: never less than the kernel.
    extra = page_share.regrouped({1: {100}, 2: {100}, 3: {100}}, {100: 1})

    assert extra == {1: 0.0, 2: 0.0, 3: 0.0}


@pytest.fixture
def three_copies(tmp_path: Path) -> Iterator[list[int]]:
    """Three processes running one binary that nothing else on the host runs."""
    assert os.geteuid() == 0, "pagemap shows page frames to root only; run the tests as root"
    binary = tmp_path / "only-here-sleep"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", binary)
    children = [subprocess.Popen([str(binary), "60"]) for _ in range(3)]
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if all(page_share.file_pages(c.pid, {str(binary)}) for c in children):
                break
            time.sleep(0.05)
        yield [child.pid for child in children]
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_the_binary_of_the_measured_is_divided_among_them_only(three_copies: list[int]) -> None:
    one = three_copies[:1]
    alone = page_share.extra_pss(one)
    together = page_share.extra_pss(three_copies)

    # Measured alone, one copy carries the pages the two others share with it...
    assert alone[one[0]] > 0
    kernel = procs.memory_of(one)["pss"]
    assert procs.memory_of(one, alone)["pss"] == kernel + round(alone[one[0]])
    # ...and measured together, the three split them as the kernel does.
    assert all(abs(extra) < PAGE for extra in together.values()), together


def test_a_process_that_is_gone_has_no_pages() -> None:
    child = subprocess.Popen(["true"])
    child.wait()

    assert page_share.file_pages(child.pid, {"/bin/true"}) == set()
    assert page_share.extra_pss([child.pid]) == {child.pid: 0}
