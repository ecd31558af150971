"""The machine a benchmark ran on, as published with its figures: CPUs, memory, kernel, Python,
TensorFlow (its version from the package metadata: never imported here) and the tfcluster commit,
with whether the checkout had uncommitted changes."""

from __future__ import annotations

import compileall
import contextlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from worker.agent.startup_pacing import usable_cpus

MIB = 1024 * 1024


@dataclass(frozen=True)
class Machine:
    cpu_model: str
    logical_cpus: int
    physical_cores: int | None
    usable_cpus: int  # the CPUs this process may run on (affinity, cgroup cpusets)
    memory_bytes: int
    kernel: str
    python: str
    tensorflow: str | None
    commit: str
    changed_files: tuple[str, ...]  # uncommitted changes to tracked files
    untracked_files: int

    def lines(self) -> list[str]:
        cores = f"{self.logical_cpus} logical CPU(s)"
        if self.physical_cores is not None:
            cores += f", {self.physical_cores} physical core(s)"
        if self.usable_cpus != self.logical_cpus:
            cores += f", {self.usable_cpus} usable by this process"
        changes = ""
        if self.changed_files or self.untracked_files:
            changes = (f" plus uncommitted changes ({len(self.changed_files)} modified tracked "
                       f"file(s): {', '.join(self.changed_files)}; {self.untracked_files} "
                       "untracked file(s))")
        return [
            f"- CPU: {self.cpu_model}; {cores}",
            f"- memory: {self.memory_bytes / MIB / 1024:.1f} GiB",
            f"- kernel: Linux {self.kernel}" if sys.platform == "linux" else f"- OS: {self.kernel}",
            f"- Python: {self.python}",
            f"- TensorFlow: {self.tensorflow or 'not installed'}",
            f"- tfcluster: commit `{self.commit}`{changes}",
        ]


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def tensorflow_version() -> str | None:
    for name in ("tensorflow", "tensorflow-cpu"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(name)
    return None


def git(repo: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                              text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""


def compile_bytecode(repo: Path) -> str:
    """Compile tfcluster's own modules (``launcher``, ``worker``) to ``__pycache__``, as ``pip
    install`` does for a package it installs; says what was done, for the report.

    An editable checkout is otherwise compiled by Python on first import and cached, unless
    ``PYTHONDONTWRITEBYTECODE`` is set (it is on some CI images and sandboxes): then every
    ``tfcluster`` start, and every agent's, compiles each module again (about 50 ms here), which
    is not what an installed tfcluster costs."""
    ok = all(compileall.compile_dir(repo / package, quiet=2) for package in ("launcher", "worker"))
    if not ok:
        return "compiling launcher/ and worker/ failed: modules compiled at every start"
    unset = "" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "; PYTHONDONTWRITEBYTECODE unset"
    return (f"launcher/ and worker/ compiled to __pycache__ before measuring, as pip install "
            f"does{unset}")


def describe(repo: Path) -> Machine:
    status = git(repo, "status", "--porcelain").splitlines()
    return Machine(
        cpu_model=cpu_model(),
        logical_cpus=os.cpu_count() or 1,
        physical_cores=psutil.cpu_count(logical=False),
        usable_cpus=usable_cpus(),
        memory_bytes=psutil.virtual_memory().total,
        kernel=platform.release() if sys.platform == "linux" else platform.platform(),
        python=f"{sys.version.split()[0]} ({sys.executable})",
        tensorflow=tensorflow_version(),
        commit=git(repo, "rev-parse", "HEAD").strip() or "unknown (not a git checkout)",
        changed_files=tuple(line[3:] for line in status if not line.startswith("??")),
        untracked_files=sum(1 for line in status if line.startswith("??")),
    )
