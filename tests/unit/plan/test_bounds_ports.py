"""Issue 7, ports: running out of ports, or a lock directory that cannot be used, is a
``TfclusterError`` whose one line says what to do, and nothing stays held."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.errors import EXIT_ERROR, TfclusterError
from launcher.plan.ports import PortAllocator, PortExhaustedError, PortLockError, port_is_free


@pytest.fixture
def allocator(tmp_path: Path) -> Iterator[PortAllocator]:
    made = PortAllocator(lock_dir=str(tmp_path / "locks"), port_range=free_pair())
    yield made
    made.close()


def free_pair() -> tuple[int, int]:
    for low in range(23000, 32000, 7):
        if port_is_free(low) and port_is_free(low + 1):
            return low, low + 1
    raise AssertionError("no two consecutive free ports")


def test_more_tasks_than_the_range_holds_says_how_many_fit(allocator: PortAllocator) -> None:
    with pytest.raises(PortExhaustedError) as info:
        allocator.allocate(13000)
    message = str(info.value)
    assert isinstance(info.value, TfclusterError) and info.value.exit_code == EXIT_ERROR
    assert "\n" not in message
    assert f"could not find 13000 free port(s) in {allocator.low}-{allocator.high}" in message
    assert "run at most 2 tasks with allocated ports on this host" in message
    assert "or give the tasks explicit ports in a spec" in message
    assert allocator.held == frozenset()


def test_ports_taken_by_others_says_how_many_are_free(allocator: PortAllocator,
                                                      tmp_path: Path) -> None:
    other = PortAllocator(lock_dir=str(tmp_path / "locks"), port_range=(allocator.low,
                                                                        allocator.high))
    try:
        other.allocate(1)
        with pytest.raises(PortExhaustedError) as info:
            allocator.allocate(2)
    finally:
        other.close()
    message = str(info.value)
    assert ", only 1 are free: stop other jobs" in message
    assert "stop other jobs that hold ports in that range, run fewer tasks" in message
    assert allocator.held == frozenset()


def test_a_lock_directory_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    allocator = PortAllocator(lock_dir=str(not_a_dir), port_range=free_pair())
    with pytest.raises(PortLockError) as info:
        allocator.allocate(1)
    assert str(info.value).startswith(f"cannot use the port lock directory {not_a_dir}: ")
    assert allocator.held == frozenset()
