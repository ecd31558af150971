"""Which links are measured at the same time: every pair of hosts once, in rounds where no host is
in two pairs (a host streams to one peer at a time, or the figures would share its NIC). The
circle method of round-robin tournaments: ``n - 1`` rounds for an even ``n``, ``n`` for an odd one,
so that a doctor of many hosts takes rounds, not pairs, times the time of one."""

from __future__ import annotations

from collections.abc import Sequence


def pair_rounds(hosts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Every unordered pair of ``hosts`` exactly once, as rounds of disjoint pairs, each pair in
    the order the hosts are listed."""
    order = {name: i for i, name in enumerate(hosts)}
    players: list[str | None] = list(hosts)
    if len(players) % 2:
        players.append(None)  # the host paired with None sits the round out
    count = len(players)
    rounds: list[list[tuple[str, str]]] = []
    for _ in range(count - 1):
        pairs = []
        for i in range(count // 2):
            a, b = players[i], players[count - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b) if order[a] < order[b] else (b, a))
        if pairs:
            rounds.append(sorted(pairs, key=lambda p: (order[p[0]], order[p[1]])))
        players = [players[0], players[-1], *players[1:-1]]
    return rounds
