"""Test tiers that need what only some machines have (root, network namespaces, a Slurm cluster,
cgroups, mount): skipped where they cannot run, but never quietly in CI.

``.ci/run`` sets :data:`REQUIRE_ENV`; then a tier that cannot run fails the test instead of skipping
it, so CI cannot go green without every tier having run. A test of such a tier calls
:func:`require` (or :func:`skip_tier`) instead of ``pytest.skip`` / ``skipif``.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

#: Set to 1 by ``.ci/run``: every tier must run here.
REQUIRE_ENV = "TFCLUSTER_TESTS_REQUIRE_ALL_TIERS"


def skip_tier(reason: str) -> NoReturn:
    """Skip the test because its tier cannot run here, or fail it where every tier must run."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason}; {REQUIRE_ENV}=1 (set by .ci/run) requires this tier to run here",
                    pytrace=False)
    pytest.skip(reason)


def require(condition: bool, reason: str) -> None:
    """:func:`skip_tier` with ``reason`` unless ``condition`` holds."""
    if not condition:
        skip_tier(reason)
