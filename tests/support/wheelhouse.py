"""tfcluster as users get it: its wheel, and the wheels of its dependencies downloaded on this host.

:func:`build_wheel` builds tfcluster's wheel from a copy of the files the package is made of (a
build in the clone would write ``build/`` there). :func:`wheelhouse` downloads, once, the wheels
of tfcluster's dependencies and one extra with this host's pip into a cache outside the clone,
keyed by the requirements themselves: a fresh clone reuses it, a changed ``pyproject.toml`` makes
a new one. Installing from it needs no registry (``pip install --no-index --find-links``), which
is how the Docker image is built (the containers reach no registry) and what keeps the clean-venv
test fast.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import tomllib

from tests.support.jobs import REPO

#: The files a wheel (and the Docker image) is built from: pyproject.toml's packages and readme.
PACKAGE_FILES = ("pyproject.toml", "README.md", "launcher", "worker")
_CACHE_ROOTS = (Path("/var/cache/tfcluster-tests"), Path.home() / ".cache" / "tfcluster-tests")


def cache_root() -> Path:
    """A cache directory outside the clone that outlives it (``/var/cache`` as root)."""
    for root in _CACHE_ROOTS:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(root, os.W_OK):
            return root
    raise RuntimeError(f"none of {', '.join(map(str, _CACHE_ROOTS))} is writable")


def requirements(extra: str) -> list[str]:
    """What building tfcluster from source needs, its dependencies and those of ``extra``, as
    ``pyproject.toml`` states them."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]
    return [*pyproject["build-system"]["requires"], *project["dependencies"],
            *project["optional-dependencies"][extra]]


def copy_package(dest: Path) -> Path:
    """The files tfcluster's wheel is built from, copied to ``dest`` (no caches)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in PACKAGE_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(source, dest / name)
    return dest


def build_wheel(dest: Path) -> Path:
    """tfcluster's wheel, built into ``dest`` from a copy of the package's files."""
    with tempfile.TemporaryDirectory(prefix="tfcluster-src-") as tmp:
        source = copy_package(Path(tmp) / "src")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "--quiet", "--wheel-dir", str(dest), str(source)],
                       check=True, capture_output=True, text=True, timeout=120)
    (wheel,) = dest.glob("tfcluster-*.whl")
    return wheel


def wheelhouse(extra: str) -> Path:
    """A directory of wheels with every requirement of tfcluster and ``extra``, for this host's
    Python and platform: downloaded the first time (a few hundred MB), reused afterwards."""
    reqs = requirements(extra)
    key = hashlib.sha256("\n".join([sysconfig.get_platform(), sys.version, *reqs]).encode())
    house = cache_root() / "wheels" / f"{extra}-{key.hexdigest()[:16]}"
    house.parent.mkdir(parents=True, exist_ok=True)
    with open(house.parent / ".lock", "w") as lock:  # one download at a time (xdist workers)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (house / ".complete").exists():
            partial = Path(tempfile.mkdtemp(prefix=f".{house.name}-", dir=house.parent))
            try:
                subprocess.run([sys.executable, "-m", "pip", "download", "--quiet",
                                "--only-binary=:all:", "--dest", str(partial), *reqs],
                               check=True, capture_output=True, text=True, timeout=900)
                (partial / ".complete").write_text("\n".join(reqs) + "\n")
                shutil.rmtree(house, ignore_errors=True)
                partial.rename(house)
            finally:
                shutil.rmtree(partial, ignore_errors=True)
    return house
