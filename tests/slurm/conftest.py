"""A real Slurm test cluster (munged, slurmctld, four slurmd daemons on this host) for the
session; see :mod:`tests.slurm.cluster`. Skipped with the reason when Slurm is not installed
(``make sysdeps`` installs it) or the tests do not run as root."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.slurm.cluster import SlurmCluster, SlurmUnavailable, create_cluster, require_slurm


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    try:
        require_slurm()
    except SlurmUnavailable as exc:
        pytest.skip(str(exc))
    cluster = create_cluster(nodes=4)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's cluster, with every job cancelled and every step gone after the test."""
    yield slurm_cluster
    slurm_cluster.cancel_all()
    assert not slurm_cluster.leftovers(), "a test left processes behind on the Slurm nodes"
