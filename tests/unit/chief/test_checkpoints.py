"""Finding the chief's latest complete checkpoint in real ``CheckpointManager`` / Keras layouts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from launcher.chief.checkpoints import (
    Checkpoint,
    Discovery,
    Skipped,
    latest_checkpoint,
    read_state,
    remove_worker_temp_dirs,
    step_of,
)


def octal_escape(text: str) -> str:
    """Escape a path the way TF's ``text_format.MessageToString`` writes a string field."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in "\"'\\":
            out.append("\\" + char)
        elif byte >= 127 or byte < 32:
            out.append(f"\\{byte:03o}")
        else:
            out.append(char)
    return "".join(out)


def state_text(paths: list[str]) -> str:
    """A ``checkpoint`` state file as ``tf.train.CheckpointManager`` writes it (oldest listed first)."""
    lines = [f'model_checkpoint_path: "{octal_escape(paths[-1])}"']
    lines += [f'all_model_checkpoint_paths: "{octal_escape(p)}"' for p in paths]
    lines += [f"all_model_checkpoint_timestamps: {1700000000.25 + i}" for i in range(len(paths))]
    lines.append("last_preserved_timestamp: 1699999990.5")
    return "\n".join(lines) + "\n"


def write_state(directory: Path, paths: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "checkpoint").write_text(state_text(paths), encoding="utf-8")


def write_ckpt(directory: Path, step: int, shards: int = 1, name: str = "ckpt") -> str:
    """``<name>-<step>.index`` and every ``.data-i-of-n`` shard, all non-empty; returns the prefix."""
    directory.mkdir(parents=True, exist_ok=True)
    prefix = directory / f"{name}-{step}"
    Path(f"{prefix}.index").write_bytes(b"index")
    for shard in range(shards):
        Path(f"{prefix}.data-{shard:05d}-of-{shards:05d}").write_bytes(b"tensors")
    return str(prefix)


def manager_dir(directory: Path, steps: tuple[int, ...] = (1, 2, 3), shards: int = 1,
                absolute: bool = False) -> Path:
    """A checkpoint directory as ``CheckpointManager(max_to_keep=3)`` leaves it."""
    prefixes = [write_ckpt(directory, step, shards) for step in steps]
    write_state(directory, prefixes if absolute else [Path(p).name for p in prefixes])
    return directory


def prefix(directory: Path, step: int) -> str:
    return f"{directory}/ckpt-{step}"


def data(step: int, shard: int = 0, shards: int = 1) -> str:
    return f"ckpt-{step}.data-{shard:05d}-of-{shards:05d}"


class Case(NamedTuple):
    shards: int
    damage: Callable[[Path], None]
    step: int | None  # the checkpoint found (None: none)
    skipped: list[tuple[int, str]]  # (step, reason), newest first


def remove(*names: str) -> Callable[[Path], None]:
    def damage(directory: Path) -> None:
        for name in names:
            (directory / name).unlink()
    return damage


def empty(*names: str) -> Callable[[Path], None]:
    def damage(directory: Path) -> None:
        for name in names:
            (directory / name).write_bytes(b"")
    return damage


def intact(directory: Path) -> None:
    del directory


CASES = {
    "latest complete wins": Case(1, intact, 3, []),
    "latest complete wins (two shards)": Case(2, intact, 3, []),
    "latest without .index": Case(1, remove("ckpt-3.index"), 2, [(3, "missing .index file")]),
    "latest with an empty .index": Case(1, empty("ckpt-3.index"), 2, [(3, "empty .index file")]),
    "latest without its data file": Case(1, remove(data(3)), 2, [(3, "no .data file")]),
    "latest with an empty data file": Case(1, empty(data(3)), 2, [(3, f"empty {data(3)}")]),
    "latest missing one of two shards": Case(2, remove(data(3, 1, 2)), 2,
                                             [(3, f"missing {data(3, 1, 2)}")]),
    "latest missing the first of two shards": Case(2, remove(data(3, 0, 2)), 2,
                                                   [(3, f"missing {data(3, 0, 2)}")]),
    "latest with an empty shard": Case(2, empty(data(3, 0, 2)), 2, [(3, f"empty {data(3, 0, 2)}")]),
    "two incomplete: falls back twice": Case(
        1, remove("ckpt-3.index", data(2)), 1,
        [(3, "missing .index file"), (2, "no .data file")]),
    "none complete": Case(
        2, remove("ckpt-3.index", "ckpt-2.index", data(1, 1, 2)), None,
        [(3, "missing .index file"), (2, "missing .index file"), (1, f"missing {data(1, 1, 2)}")]),
}


@pytest.mark.parametrize("absolute", [False, True], ids=["relative paths", "absolute paths"])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_latest_complete_checkpoint(case: Case, absolute: bool, tmp_path: Path) -> None:
    directory = manager_dir(tmp_path / "ckpt", shards=case.shards, absolute=absolute)
    case.damage(directory)
    found = latest_checkpoint(str(directory))
    expected = None if case.step is None else Checkpoint(prefix(directory, case.step), case.step)
    assert found.checkpoint == expected
    assert found.skipped == tuple(Skipped(prefix(directory, step), why)
                                  for step, why in case.skipped)
    assert found.directory == str(directory)


def test_a_checkpoint_a_task_failed_to_restore_is_skipped(tmp_path: Path) -> None:
    directory = manager_dir(tmp_path)
    found = latest_checkpoint(str(directory), bad={prefix(directory, 3)})
    assert found.checkpoint == Checkpoint(prefix(directory, 2), 2)
    assert found.skipped == (Skipped(prefix(directory, 3), "a task failed to restore it"),)


def test_bad_and_incomplete_are_both_skipped_in_order(tmp_path: Path) -> None:
    directory = manager_dir(tmp_path)
    (directory / "ckpt-2.index").unlink()
    found = latest_checkpoint(str(directory), bad=[prefix(directory, 3)])
    assert found.checkpoint == Checkpoint(prefix(directory, 1), 1)
    assert found.skipped == (Skipped(prefix(directory, 3), "a task failed to restore it"),
                             Skipped(prefix(directory, 2), "missing .index file"))


def test_a_checkpoint_named_by_step_with_a_similar_name_is_not_mixed_up(tmp_path: Path) -> None:
    # ckpt-1's data is missing; ckpt-10's data must not be taken for it.
    write_ckpt(tmp_path, 10)
    write_ckpt(tmp_path, 1)
    (tmp_path / data(1)).unlink()
    write_state(tmp_path, ["ckpt-10", "ckpt-1"])
    found = latest_checkpoint(str(tmp_path))
    assert found.checkpoint == Checkpoint(prefix(tmp_path, 10), 10)
    assert found.skipped == (Skipped(prefix(tmp_path, 1), "no .data file"),)


NOTHING = Discovery(None, (), None)


@pytest.mark.parametrize("make", [
    pytest.param(lambda d: None, id="no directory"),
    pytest.param(lambda d: d.mkdir(), id="empty directory"),
    pytest.param(lambda d: (d.mkdir(), (d / "notes.txt").write_text("x")), id="no checkpoint files"),
    pytest.param(lambda d: (d / "chief").mkdir(parents=True), id="empty chief directory"),
])
def test_nothing_to_resume_from(make: Callable[[Path], object], tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    make(directory)
    assert latest_checkpoint(str(directory)) == NOTHING


class ScanCase(NamedTuple):
    steps: tuple[int, ...]
    damage: Callable[[Path], None]
    step: int | None
    skipped: list[int]


SCANS = {
    "newest step wins (by number, not by name)": ScanCase((2, 9, 10), intact, 10, []),
    "falls back to the next newest": ScanCase((2, 9, 10), remove(data(10)), 9, [10]),
    "one checkpoint": ScanCase((5,), intact, 5, []),
}


@pytest.mark.parametrize("case", SCANS.values(), ids=SCANS.keys())
def test_without_a_state_file_index_files_are_scanned(case: ScanCase, tmp_path: Path) -> None:
    for step in case.steps:
        write_ckpt(tmp_path, step)
    case.damage(tmp_path)
    found = latest_checkpoint(str(tmp_path))
    assert found.checkpoint == (None if case.step is None
                                else Checkpoint(prefix(tmp_path, case.step), case.step))
    assert [s.prefix for s in found.skipped] == [prefix(tmp_path, s) for s in case.skipped]


def test_the_state_file_wins_over_a_newer_checkpoint_it_does_not_name(tmp_path: Path) -> None:
    # The chief died after writing ckpt-4 but before recording it: TF restores ckpt-3, so do we.
    manager_dir(tmp_path)
    write_ckpt(tmp_path, 4)
    assert latest_checkpoint(str(tmp_path)).checkpoint == Checkpoint(prefix(tmp_path, 3), 3)


def test_an_unlisted_checkpoint_is_still_a_fallback(tmp_path: Path) -> None:
    manager_dir(tmp_path, steps=(2, 3))
    write_ckpt(tmp_path, 1)  # no longer listed in the state file, but complete
    for step in (2, 3):
        (tmp_path / f"ckpt-{step}.index").unlink()
    found = latest_checkpoint(str(tmp_path))
    assert found.checkpoint == Checkpoint(prefix(tmp_path, 1), 1)
    assert [s.prefix for s in found.skipped] == [prefix(tmp_path, 3), prefix(tmp_path, 2)]


def test_keras_backup_and_restore_layout(tmp_path: Path) -> None:
    # tf_keras BackupAndRestore under MWMS: the chief in <dir>/chief, the others in workertemp_<i>.
    chief = manager_dir(tmp_path / "chief", steps=(4,))
    manager_dir(tmp_path / "workertemp_1", steps=(5,))
    found = latest_checkpoint(str(tmp_path))
    assert found.checkpoint == Checkpoint(prefix(chief, 4), 4)
    assert found.directory == str(chief)
    assert found.skipped == ()


def test_keras_layout_falls_back_inside_chief(tmp_path: Path) -> None:
    chief = manager_dir(tmp_path / "chief", steps=(3, 4))
    (chief / data(4)).write_bytes(b"")
    found = latest_checkpoint(str(tmp_path))
    assert found.checkpoint == Checkpoint(prefix(chief, 3), 3)
    assert found.skipped == (Skipped(prefix(chief, 4), f"empty {data(4)}"),)


def test_a_non_ascii_checkpoint_name_from_the_state_file(tmp_path: Path) -> None:
    # CheckpointManager(checkpoint_name="modèle"): TF writes the name with octal escapes.
    write_ckpt(tmp_path, 1, name="modèle")
    write_ckpt(tmp_path, 2, name="modèle")
    write_state(tmp_path, ["modèle-1", "modèle-2"])
    found = latest_checkpoint(str(tmp_path))
    assert found.checkpoint == Checkpoint(f"{tmp_path}/modèle-2", 2)
    assert found.skipped == ()


# --- the state file -------------------------------------------------------------------------------

STATES = {
    "newest first": (state_text(["ckpt-1", "ckpt-2", "ckpt-3"]), ["ckpt-3", "ckpt-2", "ckpt-1"]),
    "absolute paths kept": (state_text(["/c/ckpt-7", "/c/ckpt-8"]), ["/c/ckpt-8", "/c/ckpt-7"]),
    "only model_checkpoint_path": ('model_checkpoint_path: "ckpt-5"\n', ["ckpt-5"]),
    "latest not in the list comes first": (
        'model_checkpoint_path: "ckpt-9"\nall_model_checkpoint_paths: "ckpt-1"\n'
        'all_model_checkpoint_paths: "ckpt-2"\n', ["ckpt-9", "ckpt-2", "ckpt-1"]),
    "spacing TF may use": ('  model_checkpoint_path :  "ckpt-2"  \n'
                           'all_model_checkpoint_paths:"ckpt-2"\n', ["ckpt-2"]),
    "escaped quotes and backslashes": (state_text(["/c/it's \"x\"\\ckpt-1"]),
                                       ["/c/it's \"x\"\\ckpt-1"]),
    "non-ASCII (octal escapes)": (state_text(["/données/ckpt-1"]), ["/données/ckpt-1"]),
    "empty": ("", []),
    "timestamps only": ("all_model_checkpoint_timestamps: 1.5\nlast_preserved_timestamp: 1.0\n", []),
}


@pytest.mark.parametrize(("text", "expected"), STATES.values(), ids=STATES.keys())
def test_parse_state(text: str, expected: list[str]) -> None:
    assert list(read_state(text).paths) == expected


@pytest.mark.parametrize(("path", "step"), [
    ("ckpt-3", 3),
    ("/data/run/ckpt-120", 120),
    ("model.ckpt-1000", 1000),
    ("ckpt-007", 7),
    ("ckpt", None),
    ("/data/run-7/ckpt", None),
    ("ckpt-3.index", None),
    ("ckpt-", None),
])
def test_step_of(path: str, step: int | None) -> None:
    assert step_of(path) == step


# --- cleanup --------------------------------------------------------------------------------------


def test_remove_worker_temp_dirs_removes_only_worker_copies(tmp_path: Path) -> None:
    chief = manager_dir(tmp_path / "chief", steps=(1, 2))
    manager_dir(tmp_path / "workertemp_1", steps=(2,))
    (tmp_path / "workertemp_2").mkdir()
    manager_dir(tmp_path, steps=(2,))  # a CheckpointManager layout beside it
    (tmp_path / "workertemp_notes").write_text("a file, not a worker copy")
    before_chief = sorted(p.name for p in chief.iterdir())
    before_top = sorted(p.name for p in tmp_path.iterdir())

    removed = remove_worker_temp_dirs(str(tmp_path))

    assert sorted(removed) == [f"{tmp_path}/workertemp_1", f"{tmp_path}/workertemp_2"]
    assert sorted(p.name for p in chief.iterdir()) == before_chief
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        n for n in before_top if n not in ("workertemp_1", "workertemp_2")]
    assert latest_checkpoint(str(tmp_path)).checkpoint == Checkpoint(prefix(tmp_path, 2), 2)


@pytest.mark.parametrize("make", [
    pytest.param(lambda d: None, id="no directory"),
    pytest.param(manager_dir, id="no worker copies"),
])
def test_remove_worker_temp_dirs_with_nothing_to_remove(make: Callable[[Path], object],
                                                        tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    make(directory)
    before = sorted(p.name for p in directory.iterdir()) if directory.exists() else None
    assert remove_worker_temp_dirs(str(directory)) == []
    assert (sorted(p.name for p in directory.iterdir()) if directory.exists() else None) == before


def test_the_preemption_handlers_copies_beside_the_directory_are_removed_and_no_one_elses(
        tmp_path: Path) -> None:
    """TF's PreemptionCheckpointHandler gives non-chief task i ``<parent>/workertemp_<i>/<base>``
    (and leaves the directory after a run that was not preempted)."""
    directory = manager_dir(tmp_path / "ckpt", steps=(1, 2))
    manager_dir(tmp_path / "workertemp_1" / "ckpt", steps=(2,))  # a copy of this job's
    (tmp_path / "workertemp_2").mkdir()  # what a run that was not preempted leaves
    manager_dir(tmp_path / "workertemp_3" / "other-job", steps=(5,))  # another job's copy
    (tmp_path / "workertemp_4").mkdir()
    (tmp_path / "workertemp_4" / "notes.txt").write_text("not a checkpoint copy")

    removed = remove_worker_temp_dirs(str(directory))

    assert sorted(removed) == [f"{tmp_path}/workertemp_1", f"{tmp_path}/workertemp_2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "workertemp_3", "workertemp_4"]
    assert latest_checkpoint(str(directory)).checkpoint == Checkpoint(prefix(directory, 2), 2)
