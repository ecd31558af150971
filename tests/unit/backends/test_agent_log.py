"""An agent's log, where tfcluster copies the agent's stderr into it, is bounded: what does not fit
is dropped and said once; a log that a resumed run appends to counts what it already holds; a
symlink planted at its name is refused, never written through."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.backends.agent_log import AgentLog
from worker.wire.safe_open import UnsafeFileError


def test_past_its_bound_nothing_more_is_kept_and_one_line_says_so(tmp_path: Path) -> None:
    path = tmp_path / "agents" / "h.log"
    path.parent.mkdir()
    with AgentLog(path, max_bytes=100) as log:
        for _ in range(30):
            log.write(b"agent: a note\n")  # 14 bytes: 7 fit
        assert log.dropped_bytes == 23 * 14
    lines = path.read_text().splitlines()
    assert lines[:7] == ["agent: a note"] * 7
    assert lines[7:] == ["tfcluster: this log reached its bound of 0 MiB; the agent's later "
                         "output is not kept"]


def test_a_log_appended_to_counts_what_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "h.log"
    path.write_bytes(b"x" * 90 + b"\n")
    with AgentLog(path, max_bytes=100) as log:
        log.write(b"0123456789\n")  # 91 + 11 > 100
        assert log.written == 91 and log.dropped_bytes == 11


def test_a_symlink_at_its_name_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("a victim's file\n")
    (tmp_path / "h.log").symlink_to(victim)
    with pytest.raises(UnsafeFileError, match="is a symlink: tfcluster will not write through it"):
        AgentLog(tmp_path / "h.log")
    assert victim.read_text() == "a victim's file\n"
