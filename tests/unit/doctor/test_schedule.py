"""Which links the doctor measures at the same time: every pair once, no host twice in a round."""

from __future__ import annotations

import itertools

import pytest

from launcher.doctor.schedule import pair_rounds


@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 5, 8, 9])
def test_every_pair_once_and_no_host_twice_in_a_round(count: int) -> None:
    hosts = [f"h{i}" for i in range(1, count + 1)]
    rounds = pair_rounds(hosts)
    pairs = [pair for round_ in rounds for pair in round_]
    assert sorted(pairs) == sorted(itertools.combinations(hosts, 2))
    for round_ in rounds:
        members = [host for pair in round_ for host in pair]
        assert len(members) == len(set(members))
    # rounds, not pairs: n - 1 of them for an even n, n for an odd one
    assert len(rounds) == (0 if count < 2 else count - 1 if count % 2 == 0 else count)


def test_each_pair_is_in_the_order_the_hosts_are_listed() -> None:
    hosts = ["b", "a", "c", "d", "e"]
    for round_ in pair_rounds(hosts):
        assert round_ == sorted(round_, key=lambda p: (hosts.index(p[0]), hosts.index(p[1])))
        for first, second in round_:
            assert hosts.index(first) < hosts.index(second)
