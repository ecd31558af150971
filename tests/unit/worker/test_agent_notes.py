"""An agent's notes, which go to its log for the whole job, are bounded: past the bound one line
says that later notes are not kept, and nothing more is written."""

from __future__ import annotations

import io

from worker.agent.notes import Notes


def test_past_the_bound_one_line_says_so_and_nothing_more_is_written() -> None:
    out = io.StringIO()
    notes = Notes(max_bytes=3 * 1024 * 1024, stream=out)
    for index in range(400_000):
        notes(f"spare worker:{index % 8}: ready")
    lines = out.getvalue().splitlines()
    assert len(out.getvalue()) <= 3 * 1024 * 1024 + 100
    assert lines[0] == "agent: spare worker:0: ready"
    assert lines[-1] == "agent: 3 MiB of notes written; later ones are not kept"
    assert sum("not kept" in line for line in lines) == 1


def test_a_log_that_cannot_be_written_is_no_error() -> None:
    out = io.StringIO()
    out.close()
    Notes(stream=out)("the coordinator runs again")  # no exception
