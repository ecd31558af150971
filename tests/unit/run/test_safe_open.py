"""worker.wire.safe_open: how tfcluster opens files in directories others may write (issue 25,
items 1 and 8). A planted symlink, hard link, FIFO or device is refused in one line naming the
file, without blocking, and whatever it points to is left exactly as it was."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from tests.unit.run.conftest import VICTIM_TEXT
from worker.wire.safe_open import (
    UnsafeFileError,
    create_new,
    make_dirs,
    open_appending,
    open_file,
    read_bytes,
    read_text,
    replace_file,
    truncate_ours,
)

pytestmark = pytest.mark.timeout(30)  # a FIFO that blocked an open would hang: a failure



@pytest.fixture
def shared(tmp_path: Path) -> Path:
    path = tmp_path / "shared"
    path.mkdir()
    return path


def one_line(exc: pytest.ExceptionInfo[UnsafeFileError], path: Path, what: str) -> str:
    text = str(exc.value)
    assert "\n" not in text
    assert text.startswith(f"{path} is {what}: tfcluster will not ")
    assert text.endswith("; remove it if it is not yours")
    return text


def test_a_symlink_is_neither_appended_to_nor_read(shared: Path, victim: Path) -> None:
    (shared / "events.jsonl").symlink_to(victim)
    with pytest.raises(UnsafeFileError) as written:
        open_appending(shared / "events.jsonl")
    assert "will not write through it" in one_line(written, shared / "events.jsonl", "a symlink")
    with pytest.raises(UnsafeFileError) as read:
        read_text(shared / "events.jsonl", 1024)
    assert "will not read it" in one_line(read, shared / "events.jsonl", "a symlink")
    assert victim.read_text() == VICTIM_TEXT


def test_a_dangling_symlink_creates_nothing_where_it_points(shared: Path, tmp_path: Path) -> None:
    (shared / "metrics.jsonl").symlink_to(tmp_path / "created-by-the-attacker")
    with pytest.raises(UnsafeFileError):
        open_appending(shared / "metrics.jsonl")
    assert not (tmp_path / "created-by-the-attacker").exists()


@pytest.mark.parametrize("flags", [os.O_RDONLY, os.O_WRONLY, os.O_RDWR | os.O_CREAT])
def test_a_fifo_is_refused_without_blocking(shared: Path, flags: int) -> None:
    os.mkfifo(shared / "checkpoint")
    with pytest.raises(UnsafeFileError) as refused:
        open_file(shared / "checkpoint", flags)
    one_line(refused, shared / "checkpoint", "a FIFO")


def test_a_symlink_to_a_device_is_refused(shared: Path) -> None:
    (shared / "summary.json").symlink_to("/dev/zero")
    with pytest.raises(UnsafeFileError):
        read_bytes(shared / "summary.json", 10**12)


def test_a_device_itself_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsafeFileError) as refused:
        read_bytes("/dev/zero", 10)
    one_line(refused, Path("/dev/zero"), "a character device")


def test_a_hard_link_is_read_but_never_written(shared: Path, victim: Path) -> None:
    os.link(victim, shared / ".tfcluster.lock")
    assert read_text(shared / ".tfcluster.lock", 1024) == VICTIM_TEXT
    with pytest.raises(UnsafeFileError) as refused:
        open_file(shared / ".tfcluster.lock", os.O_RDWR | os.O_CREAT)
    one_line(refused, shared / ".tfcluster.lock", "a file with 2 names (a hard link)")
    assert victim.read_text() == VICTIM_TEXT


def test_a_file_of_another_user_is_never_written(shared: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (shared / "planted").write_text("theirs\n")
    owner = os.stat(shared / "planted").st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    with pytest.raises(UnsafeFileError) as refused:
        open_appending(shared / "planted")
    one_line(refused, shared / "planted", f"a file of another user (uid {owner})")
    assert read_text(shared / "planted", 100) == "theirs\n"  # reading it is harmless


def test_a_regular_file_of_ours_opens_blocking_and_appends(shared: Path) -> None:
    with open_appending(shared / "events.jsonl") as handle:
        assert not fcntl.fcntl(handle.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK
        handle.write("one\n")
    with open_appending(shared / "events.jsonl") as handle:
        handle.write("two\n")
    assert read_text(shared / "events.jsonl", 100) == "one\ntwo\n"
    assert read_bytes(shared / "events.jsonl", 3) == b"one"


def test_only_the_last_component_is_checked(tmp_path: Path, shared: Path) -> None:
    """A directory the user reached through a symlink of their own choosing is fine."""
    (tmp_path / "via-link").symlink_to(shared)
    with open_appending(tmp_path / "via-link" / "events.jsonl") as handle:
        handle.write("kept\n")
    assert (shared / "events.jsonl").read_text() == "kept\n"


def test_truncate_is_never_a_flag_and_only_ours_after_the_checks(shared: Path) -> None:
    with pytest.raises(ValueError, match="never truncates"):
        open_file(shared / "lock", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    (shared / "lock").write_text("old record\n")
    fd = open_file(shared / "lock", os.O_RDWR)
    try:
        truncate_ours(fd, str(shared / "lock"))
        assert os.fstat(fd).st_size == 0
    finally:
        os.close(fd)


def test_create_new_refuses_any_existing_name(shared: Path, victim: Path) -> None:
    (shared / "events.out.tfevents").symlink_to(victim)
    with pytest.raises(FileExistsError):
        create_new(shared / "events.out.tfevents")
    with create_new(shared / "fresh") as handle:
        handle.write(b"x")
    assert (shared / "fresh").read_bytes() == b"x"
    assert victim.read_text() == VICTIM_TEXT


def test_replace_file_replaces_a_planted_symlink_not_its_target(shared: Path,
                                                                victim: Path) -> None:
    (shared / "summary.json").symlink_to(victim)
    os.symlink(victim, shared / f".summary.json.{os.getpid()}.tmp")  # its temporary name too
    replace_file(shared / "summary.json", b"{}\n", 0o644)
    assert not (shared / "summary.json").is_symlink()
    assert (shared / "summary.json").read_bytes() == b"{}\n"
    assert victim.read_text() == VICTIM_TEXT
    assert sorted(p.name for p in shared.iterdir()) == ["summary.json"]


def test_make_dirs_refuses_a_symlinked_level(shared: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (shared / "tensorboard").symlink_to(elsewhere)
    with pytest.raises(UnsafeFileError) as refused:
        make_dirs(shared, "tensorboard", "worker-0")
    one_line(refused, shared / "tensorboard", "a symlink")
    assert not list(elsewhere.iterdir())
    made = make_dirs(shared, "attempt-0", "inner")
    assert Path(made) == shared / "attempt-0" / "inner" and Path(made).is_dir()
    assert make_dirs(shared, "attempt-0", "inner") == made  # again: already there is fine
