"""The recovery benchmark's workloads: the jobs ``recovery.py`` (and ``run_all.py``) drill
(:class:`Workload`, with the spec each run writes) and the ways of running them (:class:`Variant`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import REPO, Tfcluster, merged

FAKE_TRAINER = REPO / "tests" / "support" / "fake_trainer.py"
TIMED_ENTRY = REPO / "benchmarks" / "tasks" / "timed_entry.py"
TIMING_DIR_ENV = "BENCH_TIMING_DIR"  # read by tasks/timed_entry.py


@dataclass(frozen=True)
class Workload:
    """A job to hurt: what its tasks run, where, and when the drill kills which task. Every task
    starts through ``tasks/timed_entry.py``, which notes when ``heavy_import`` had been imported."""

    key: str
    title: str
    entry: tuple[str, ...]  # the entry argv: (SCRIPT, ARGS...) or ("-m", MODULE, ARGS...)
    heavy_import: str
    tasks: tuple[Mapping[str, Any], ...]
    steps: int
    checkpoint_every: int
    task: str  # the task the drill kills
    at_step: int
    grace_period_s: float
    timeout_s: float  # per run
    env: Mapping[str, str] = field(default_factory=dict)

    def spec(self, marker: Mapping[str, str], backoff_s: float, timing_dir: Path,
             overrides: Mapping[str, Any]) -> dict[str, Any]:
        return merged({
            "name": f"bench-{self.key}",
            "entrypoint": {"script": str(TIMED_ENTRY), "args": [self.heavy_import, *self.entry]},
            "workdir": str(REPO),
            "env": {**self.env, **marker, TIMING_DIR_ENV: str(timing_dir)},
            "tasks": [dict(t) for t in self.tasks],
            "restart": {"max_restarts": 1, "backoff_s": backoff_s},
            "health": {"grace_period_s": self.grace_period_s},
        }, overrides)


def fake_workload(*, workers: int = 2, chief: bool = False, steps: int = 100,
                  checkpoint_every: int = 10, at_step: int = 55, key: str = "fake") -> Workload:
    """``tests/support/fake_trainer.py`` (no TensorFlow), steps of 0.02 s, the chief checkpointing."""
    tasks = ([{"type": "chief", "host": "localhost"}] if chief else []) \
        + [{"type": "worker", "host": "localhost", "count": workers}]
    shape = f"{'chief + ' if chief else ''}{workers} workers"
    return Workload(key, f"fake trainer ({shape})",
                    entry=(str(FAKE_TRAINER), "--steps", str(steps), "--step-time", "0.02",
                           "--checkpoint-every", str(checkpoint_every)),
                    heavy_import="worker.reporting", tasks=tuple(tasks), steps=steps,
                    checkpoint_every=checkpoint_every, task="worker:1", at_step=at_step,
                    grace_period_s=3.0, timeout_s=90.0)


def digits_workload(*, steps: int = 200, checkpoint_every: int = 50, at_step: int = 120,
                    grace_s: float = 10.0) -> Workload:
    """The real TF MWMS example on two workers (as in ``cluster_specs/local-2workers.yaml``)."""
    return Workload("digits", "digits, TF MWMS (2 workers)",
                    entry=("-m", "worker.examples.digits", "--steps", str(steps),
                           "--checkpoint-every", str(checkpoint_every), "--deterministic"),
                    heavy_import="tensorflow",
                    tasks=({"type": "worker", "host": "localhost", "count": 2},), steps=steps,
                    checkpoint_every=checkpoint_every, task="worker:1", at_step=at_step,
                    grace_period_s=grace_s, timeout_s=600.0, env={"TF_CPP_MIN_LOG_LEVEL": "2"})


def workloads(fake_at_step: int, tf_at_step: int, tf_grace_s: float) -> tuple[Workload, Workload]:
    return (fake_workload(chief=True, at_step=fake_at_step),
            digits_workload(at_step=tf_at_step, grace_s=tf_grace_s))


def no_overrides() -> Mapping[str, Any]:
    return {}


def nothing_to_check() -> None:
    return None


@dataclass(frozen=True)
class Variant:
    """One way of running a workload, its results labelled ``label``: the CLI to run it with,
    what to change in its spec (called for every run: fresh ports...), and a check after every run
    (BenchmarkError if something is left behind that the marker cannot see, e.g. sshd sessions)."""

    label: str
    cli: Tfcluster
    overrides: Callable[[], Mapping[str, Any]] = no_overrides
    check_after: Callable[[], None] = nothing_to_check
