"""Shared fixtures. Tests that start processes use ``tests.jobs`` and always clean up."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: With ``-n 2 --dist loadgroup`` (``make test``), the tests of each group run on one worker, in
#: order, because they share something machine-wide: the Slurm test cluster, network namespaces,
#: the sshd fixture; and real TensorFlow jobs, in two groups of about the same length so that at
#: most two run at once (one per core). The unit and integration tests are spread over both.
_SERIAL_GROUPS = {"slurm": "slurm", "netns": "netns", "ssh": "ssh"}
#: The real-TensorFlow files of the second group (the others are in the first).
_TF_SECOND = {"test_amp_accumulate.py", "test_saving.py", "test_resumable_input.py",
              "test_keras_fit.py", "test_metrics_keras.py", "test_gpu.py"}


# tryfirst: xdist's own hook turns the xdist_group markers into the groups, and it ran before
# this one, so no test was grouped (each "serial" group was spread over both workers).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = item.path.parent.name
        group = _SERIAL_GROUPS.get(folder)
        if folder == "e2e":
            group = "tensorflow-2" if item.path.name in _TF_SECOND else "tensorflow-1"
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
