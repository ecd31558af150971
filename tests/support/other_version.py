"""A copy of this repository's ``worker`` package that announces another tfcluster version, for
the tests of the version check (:mod:`worker.wire.handshake`)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
from pathlib import Path

from tests.support.jobs import REPO

OTHER_VERSION = "9.9.9"


def copy_of_worker(dest: Path, version: str = OTHER_VERSION) -> Path:
    """``dest/worker``: a copy of ``worker/`` whose ``TFCLUSTER_VERSION`` is ``version``. ``dest``
    is a directory to run in (it holds tfcluster's own ``worker``, so it is imported from there)
    or to put first on ``PYTHONPATH``."""
    shutil.copytree(REPO / "worker", dest / "worker",
                    ignore=shutil.ignore_patterns("__pycache__"))
    version_py = dest / "worker" / "wire" / "version.py"
    text, count = re.subn(r'TFCLUSTER_VERSION = "[^"]*"', f'TFCLUSTER_VERSION = "{version}"',
                          version_py.read_text())
    assert count == 1, "worker/wire/version.py no longer spells TFCLUSTER_VERSION as expected"
    version_py.write_text(text)
    return dest


def python_with(path: Path, wrapper: Path) -> Path:
    """An executable ``wrapper`` that runs this interpreter with ``path`` first on PYTHONPATH:
    a spec's ``python`` for a host whose tfcluster is the one under ``path``."""
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={path}${{PYTHONPATH:+:$PYTHONPATH}} '
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    assert os.access(wrapper, os.X_OK)
    return wrapper
