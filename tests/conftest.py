"""Shared fixtures. Tests that start processes use ``tests.support.jobs`` and always clean up."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.slurm.cluster import SlurmCluster

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: With ``-n 3 --dist loadgroup`` (``make test``), the tests of each group run on one worker, in
#: order, because they share something machine-wide: the Slurm test cluster, network namespaces,
#: the sshd fixture (a test is in one of these by its folder or its marker); and real TensorFlow
#: jobs, in two groups. At most two workers run a group at once (one real TensorFlow job per
#: core), the sshd tests beside them; the unit and integration tests run on the third worker once
#: the sshd tests are done, and on any worker left without a group
#: (:mod:`tests.support.scheduling`).
_SERIAL_GROUPS = {"slurm": "slurm", "netns": "netns", "ssh": "ssh",
                  # the Docker cluster's bridge takes a /24 of 198.18.0.0/15, as netns hosts do
                  "docker": "netns"}
#: The real-TensorFlow files of the second group (the others are in the first). xdist queues the
#: groups by their number of tests: netns and tensorflow-1 start together, slurm follows
#: whichever ends first, and tensorflow-2 comes last. So the second group is the short one,
#: for the worker that ran netns and then slurm while tensorflow-1 still runs. In CI on 6ee5265
#: (netns 713 s, tensorflow-1 887 s, slurm 201 s, tensorflow-2 223 s) it could start only once
#: tensorflow-1 ended, and the run took 1121 s; with test_saving, test_resumable_input and
#: test_keras_fit in the first group (about 990 s and 120 s), it starts after slurm, at about
#: 914 s, and ends at about 1035 s.
_TF_SECOND = {"test_amp_accumulate.py", "test_metrics_keras.py", "test_gpu.py"}


# tryfirst: xdist's own hook turns the xdist_group markers into the groups, and it ran before
# this one, so no test was grouped (each "serial" group was spread over both workers).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = item.path.parent.name
        group = _SERIAL_GROUPS.get(folder) or next(
            (g for mark, g in _SERIAL_GROUPS.items() if item.get_closest_marker(mark)), None)
        if folder == "e2e":
            group = "tensorflow-2" if item.path.name in _TF_SECOND else "tensorflow-1"
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run without xdist has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (``make test``) with at most two workers in a serial group at once
    and the others on the tests of no group (:mod:`tests.support.scheduling`)."""
    if config.getoption("dist") != "loadgroup":
        return None
    from tests.support.scheduling import SerialGroupsScheduling

    return SerialGroupsScheduling(config, log)


# --- the Slurm test cluster (tests/slurm, and the Slurm engine of tests/contract) ---------------


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A real Slurm test cluster (munged, slurmctld, four slurmd daemons on this host) for the
    session; see :mod:`tests.slurm.cluster`. Skipped with the reason when Slurm is not installed
    (``make sysdeps`` installs it) or the tests do not run as root."""
    from tests.slurm.cluster import SlurmUnavailable, create_cluster, require_slurm
    from tests.support.tiers import skip_tier

    try:
        require_slurm()
    except SlurmUnavailable as exc:
        skip_tier(str(exc))
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
