"""The coordinator's side of filling warm spares early (:mod:`launcher.job.spare_fill`): every
agent is told once, when a checkpoint newer than the attempt's start appears in the chief's
directory; not for the checkpoint the attempt resumed from, not after a step was reported (the
agents fill then themselves), not after ``spare_fill_delay_s``."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from launcher.chief.access import ChiefFiles
from launcher.chief.checkpoints import LocalFS
from launcher.job.hooks import TaskControl
from launcher.job.spare_fill import LOOK_EVERY_S, FirstCheckpointWatch
from worker.wire.protocol import FillSpares, Message


@dataclass
class Host:
    local: bool = True


@dataclass
class Plan:
    checkpoint_dir: str | None
    chief_host: Host = field(default_factory=Host)


@dataclass
class Control:
    plan: Plan
    attempt: int = 0
    started_at: float = 0.0
    first_progress_at: float | None = None


def save(directory: Path, step: int) -> None:
    """A checkpoint in CheckpointManager's layout (data, index, then the state file)."""
    directory.mkdir(exist_ok=True)
    for suffix in (".data-00000-of-00001", ".index"):
        (directory / f"ckpt-{step}{suffix}").write_text("x")
    (directory / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{step}"\n'
                                          f'all_model_checkpoint_paths: "ckpt-{step}"\n')


def watch(sent: list[Message], delay_s: float = 30.0) -> FirstCheckpointWatch:
    files = ChiefFiles(fs=lambda _host: contextlib.nullcontext(LocalFS()))
    return FirstCheckpointWatch(sent.append, files, delay_s)


def tick(hook: FirstCheckpointWatch, control: Control, now: float) -> float:
    return hook.on_tick(cast(TaskControl, cast(Any, control)), now)


def test_the_first_checkpoint_of_the_attempt_tells_every_agent_once(tmp_path: Path) -> None:
    sent: list[Message] = []
    hook, control = watch(sent), Control(Plan(str(tmp_path / "ckpt")))
    assert tick(hook, control, 0.0) == LOOK_EVERY_S
    assert tick(hook, control, LOOK_EVERY_S) == 2 * LOOK_EVERY_S and sent == []
    save(tmp_path / "ckpt", 50)
    assert tick(hook, control, 2 * LOOK_EVERY_S) == math.inf
    assert len(sent) == 1 and isinstance(sent[0], FillSpares) and "ckpt-50" in sent[0].why
    assert tick(hook, control, 3 * LOOK_EVERY_S) == math.inf and len(sent) == 1


def test_the_checkpoint_an_attempt_resumed_from_is_not_its_first(tmp_path: Path) -> None:
    save(tmp_path / "ckpt", 50)
    sent: list[Message] = []
    hook, control = watch(sent), Control(Plan(str(tmp_path / "ckpt")), attempt=1)
    tick(hook, control, 0.0)
    assert tick(hook, control, LOOK_EVERY_S) < math.inf and sent == []
    save(tmp_path / "ckpt", 100)
    tick(hook, control, 2 * LOOK_EVERY_S)
    assert [type(m) for m in sent] == [FillSpares]


def test_a_reported_step_or_the_fill_delay_ends_the_watch(tmp_path: Path) -> None:
    sent: list[Message] = []
    hook, control = watch(sent, delay_s=5.0), Control(Plan(str(tmp_path / "ckpt")))
    tick(hook, control, 0.0)
    hook.on_progress(cast(TaskControl, cast(Any, control)), "worker:0", 1)
    save(tmp_path / "ckpt", 10)
    assert tick(hook, control, LOOK_EVERY_S) == math.inf and sent == []
    later = Control(Plan(str(tmp_path / "ckpt")), attempt=1, started_at=100.0)
    assert tick(hook, later, 100.0) < math.inf  # a new attempt: watched again
    save(tmp_path / "ckpt", 20)
    assert tick(hook, later, 105.0) == math.inf and sent == []  # past the delay: agents fill


def test_no_checkpoint_dir_nothing_to_watch() -> None:
    sent: list[Message] = []
    hook = watch(sent)
    assert tick(hook, Control(Plan(None)), 0.0) == math.inf and sent == []
