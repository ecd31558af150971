"""Port allocation for simulated clusters: free, distinct, and never shared between two jobs."""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.plan.ports import (
    PortAllocator,
    PortExhaustedError,
    candidate_range,
    ephemeral_range,
    port_is_free,
)


def free_window(size: int) -> tuple[int, int]:
    """``size`` consecutive ports of the candidate range that are free right now."""
    low, high = candidate_range()
    for _ in range(200):
        start = random.randint(low, high - size + 1)
        if all(port_is_free(p) for p in range(start, start + size)):
            return start, start + size - 1
    raise AssertionError(f"no {size} consecutive free ports in {low}-{high}")


@pytest.fixture
def allocators() -> Iterator[list[PortAllocator]]:
    """Allocators made by a test, closed at the end; all share one lock dir."""
    made: list[PortAllocator] = []
    yield made
    for allocator in made:
        allocator.close()


def new_allocator(made: list[PortAllocator], lock_dir: Path,
                  port_range: tuple[int, int] | None = None) -> PortAllocator:
    allocator = PortAllocator(lock_dir=str(lock_dir), port_range=port_range)
    made.append(allocator)
    return allocator


def can_listen(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
            sock.listen()
        except OSError:
            return False
    return True


def test_candidate_range_avoids_the_ephemeral_range() -> None:
    low, high = candidate_range()
    eph_low, eph_high = ephemeral_range()
    assert 1024 < low <= high <= 65535
    assert high < eph_low or low > eph_high


@pytest.mark.parametrize("count", [1, 3, 8])
def test_allocated_ports_are_distinct_free_and_outside_the_ephemeral_range(
        count: int, tmp_path: Path, allocators: list[PortAllocator]) -> None:
    allocator = new_allocator(allocators, tmp_path)
    ports = allocator.allocate(count)
    low, high = candidate_range()
    eph_low, eph_high = ephemeral_range()
    assert len(ports) == count
    assert len(set(ports)) == count
    assert allocator.held == frozenset(ports)
    for port in ports:
        assert low <= port <= high
        assert not eph_low <= port <= eph_high
        assert port_is_free(port)
        assert can_listen(port)


def test_repeated_allocations_never_repeat_a_held_port(tmp_path: Path,
                                                       allocators: list[PortAllocator]) -> None:
    window = free_window(4)
    allocator = new_allocator(allocators, tmp_path, window)
    ports = allocator.allocate(2) + allocator.allocate(2)
    assert sorted(ports) == list(range(window[0], window[1] + 1))
    with pytest.raises(PortExhaustedError):
        allocator.allocate(1)


def test_a_port_held_by_one_allocator_is_never_given_by_another(
        tmp_path: Path, allocators: list[PortAllocator]) -> None:
    window = free_window(3)
    first = new_allocator(allocators, tmp_path, window)
    second = new_allocator(allocators, tmp_path, window)
    taken = first.allocate(2)
    (other,) = second.allocate(1)
    assert other not in taken
    assert {*taken, other} == set(range(window[0], window[1] + 1))
    with pytest.raises(PortExhaustedError):
        second.allocate(1)
    # release one: it becomes available to the other allocator
    first.release([taken[0]])
    assert first.held == frozenset(taken[1:])
    assert second.allocate(1) == [taken[0]]
    # close the first: everything it held is free for the second
    first.close()
    first.close()  # safe to call more than once
    assert first.held == frozenset()
    assert second.allocate(1) == [taken[1]]


def test_allocators_with_different_lock_dirs_do_not_see_each_other(
        tmp_path: Path, allocators: list[PortAllocator]) -> None:
    window = free_window(1)
    one = new_allocator(allocators, tmp_path / "a", window)
    two = new_allocator(allocators, tmp_path / "b", window)
    assert one.allocate(1) == two.allocate(1) == [window[0]]


@pytest.mark.parametrize(
    "address",
    [
        pytest.param(("127.0.0.1", socket.AF_INET), id="ipv4-loopback"),
        pytest.param(("0.0.0.0", socket.AF_INET), id="ipv4-any"),
        pytest.param(("::1", socket.AF_INET6), id="ipv6-loopback"),
        pytest.param(("::", socket.AF_INET6), id="ipv6-any"),
    ],
)
def test_a_port_with_a_listener_is_skipped(address: tuple[str, socket.AddressFamily],
                                           tmp_path: Path,
                                           allocators: list[PortAllocator]) -> None:
    host, family = address
    window = free_window(2)
    busy, free = window
    with contextlib.ExitStack() as stack:
        try:
            listener = stack.enter_context(socket.socket(family, socket.SOCK_STREAM))
            listener.bind((host, busy))
        except OSError as exc:  # e.g. no IPv6 in this container: the IPv4 cases still run
            if family == socket.AF_INET6:
                return
            raise AssertionError(f"cannot bind {host}:{busy}: {exc}") from exc
        listener.listen()
        assert not port_is_free(busy)
        allocator = new_allocator(allocators, tmp_path, window)
        assert allocator.allocate(1) == [free]
        with pytest.raises(PortExhaustedError):
            allocator.allocate(1)
        assert allocator.held == frozenset({free})


def test_exhaustion_names_the_range_and_keeps_nothing(tmp_path: Path,
                                                      allocators: list[PortAllocator]) -> None:
    window = free_window(2)
    allocator = new_allocator(allocators, tmp_path, window)
    with pytest.raises(PortExhaustedError, match=f"3 free port.*{window[0]}-{window[1]}"):
        allocator.allocate(3)
    assert allocator.held == frozenset()
    # the ports it tried were not left locked: another allocator gets both
    other = new_allocator(allocators, tmp_path, window)
    assert sorted(other.allocate(2)) == [window[0], window[1]]


def test_avoid_is_respected(tmp_path: Path, allocators: list[PortAllocator]) -> None:
    window = free_window(3)
    ports = list(range(window[0], window[1] + 1))
    allocator = new_allocator(allocators, tmp_path, window)
    assert allocator.allocate(1, avoid=ports[:2]) == [ports[2]]
    allocator.close()
    with pytest.raises(PortExhaustedError):
        allocator.allocate(1, avoid=ports)
    assert sorted(allocator.allocate(2, avoid=[ports[1]])) == [ports[0], ports[2]]


def test_allocate_zero_is_empty(tmp_path: Path, allocators: list[PortAllocator]) -> None:
    assert new_allocator(allocators, tmp_path).allocate(0) == []
