"""The engine under the contract: one ``rig`` per engine (fake, local, SSH, Slurm), always
cleaned up, even when its test failed; the SSH and Slurm ones run a real sshd / Slurm cluster
(their markers put them in those serial groups)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.harness import Rig
from tests.contract.rigs import make_rig
from tests.ssh.conftest import client_key, known_hosts, mark, ssh, sshd

#: The SSH engine's fixtures (tests/ssh/conftest.py), used by its rig.
__all__ = ["client_key", "known_hosts", "mark", "ssh", "sshd"]

ENGINES = ["fake", "local", pytest.param("ssh", marks=pytest.mark.ssh),
           pytest.param("slurm", marks=pytest.mark.slurm)]


@pytest.fixture(params=ENGINES)
def rig(request: pytest.FixtureRequest, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    engine = make_rig(request.param, request, tmp_path, monkeypatch)
    try:
        yield engine
    finally:
        left = engine.cleanup()
    assert not left, f"{engine.name}: processes of the job left after the test: {left}"
