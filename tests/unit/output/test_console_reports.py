"""What a task reports cannot drive the user's terminal (issue 25, item 17): a ``reported`` line
shows a report kind or data with escape codes escaped and is cut at 1000 characters; a task line cut
at 1000 characters never ends in half an escape sequence and resets the colours it set."""

from __future__ import annotations

import io

from launcher.job.task_reports import handle_report
from launcher.job.tasks import TaskTable
from launcher.output.console import MAX_LINE_CHARS, Console
from worker.wire.protocol import TaskReport


def reported(kind: str, data: dict[str, object]) -> str:
    err = io.StringIO()
    console = Console(out=io.StringIO(), err=err, colour=False)
    handle_report(TaskReport(task="worker:0", kind=kind, ts=1.0, data=data), 0,
                  tasks=TaskTable([]), bad=set(), emit=lambda event: None, console=console,
                  redact=lambda text: text)
    console.close()
    return err.getvalue()


def test_a_reported_line_shows_escape_codes_escaped_and_is_cut() -> None:
    shown = reported("\x1b[2J\x1b]0;pwned\x07" + "k" * 1500, {"note": "\x1b[31mred\r\n" * 200})
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown
    assert shown.count("\n") == 1  # one line
    assert "\\x1b[2J" in shown
    assert len(shown) < MAX_LINE_CHARS + 100 and "more characters]" in shown


def test_a_cut_task_line_never_ends_in_half_an_escape_sequence() -> None:
    out = io.StringIO()
    console = Console(out=out, err=io.StringIO(), colour=False)
    line = "a" * (MAX_LINE_CHARS - 3) + "\x1b[31m" + "b" * 2000  # the cut falls inside the code
    console.task_line("worker:0", line)
    console.task_line("worker:0", "\x1b[32m" + "c" * 2000)
    console.close()
    first, second = out.getvalue().splitlines()
    assert first.endswith("a\u2026 [2002 more characters in the task log]")
    assert "\x1b[3" not in first
    assert second.startswith("[worker:0] \x1b[32mccc") and "\x1b[0m\u2026 [" in second
