"""Fixtures for tests whose "hosts" are Linux network namespaces on a bridge, each with its own sshd
(see ``tests.netns.lifecycle``). They need root; without it (or where ``ip netns add`` is refused) the
tests are skipped with the reason. A missing openssh-server is an error: ``make sshd`` installs it.

    def test_something(netns_hosts: NetnsHostsFactory, tmp_path: Path) -> None:
        cluster = netns_hosts(3)                     # h1, h2, h3 at cluster[i].address
        spec = cluster.write_spec(tmp_path / "spec.yaml", entrypoint={"module": "..."})
        cluster["h2"].link_down()                    # h2 is cut off ...
        cluster["h2"].link_up()                      # ... and back
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.netns.cluster import NetnsCluster, NetnsHostsFactory
from tests.netns.lifecycle import create_cluster, sweep_stale
from tests.netns.plumbing import NetnsUnavailableError, SshdMissingError, check_available, require_sshd
from tests.support.tiers import skip_tier

_MARKER = "netns: runs Linux network namespaces with an sshd each (needs root)"


def pytest_configure(config: pytest.Config) -> None:
    # Until pyproject.toml registers the marker, register it here so --strict-markers accepts it.
    if not any(str(line).split(":")[0].strip() == "netns" for line in config.getini("markers")):
        config.addinivalue_line("markers", _MARKER)


@pytest.fixture(scope="session")
def netns_ready() -> None:
    """Skips unless namespaces can be made here; then, once per session, removes the sets that
    killed runs left behind (never those of a live run, e.g. another xdist worker)."""
    try:
        check_available()
    except NetnsUnavailableError as exc:
        skip_tier(str(exc))
    try:
        require_sshd()
    except SshdMissingError as exc:
        pytest.fail(str(exc))
    sweep_stale()


@pytest.fixture(scope="module")
def netns_hosts(netns_ready: None,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsHostsFactory]:
    """``netns_hosts(n=3, *, fresh=False) -> NetnsCluster``: ``n`` namespace hosts for this module.

    Calls with the same ``n`` share one set; each call first ``reset()``s it (every link up, no
    process left but the sshds). ``fresh=True`` builds a new set. All are torn down at the end of
    the module and checked to be gone.
    """
    shared: dict[int, NetnsCluster] = {}
    made: list[NetnsCluster] = []

    def make(n: int = 3, *, fresh: bool = False) -> NetnsCluster:
        if not fresh and n in shared:
            shared[n].reset()
            return shared[n]
        cluster = create_cluster(n, tmp_path_factory.mktemp("netns"))
        made.append(cluster)
        if not fresh:
            shared[n] = cluster
        return cluster

    try:
        yield make
    finally:
        problems = []
        for cluster in made:
            try:
                cluster.teardown()
            except RuntimeError as exc:
                problems.append(str(exc))
        if problems:
            pytest.fail("\n".join(problems))

