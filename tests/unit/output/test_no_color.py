"""``NO_COLOR`` takes colour away and nothing else (https://no-color.org): on a terminal the live
table is still drawn, without colour; the pre-flight and doctor tables stay tables."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator

import pytest
from rich.table import Table
from rich.text import Text

from launcher.output.console import Console
from launcher.preflight.view import wants_rich

#: An SGR escape sequence and its parameters.
_SGR = re.compile(r"\x1b\[([0-9;]*)m")


def colours(text: str) -> list[str]:
    """The colour-setting SGR parameters in ``text`` (foreground, background, 256 / true colour)."""
    found = []
    for params in _SGR.findall(text):
        for param in params.split(";"):
            if param.isdigit() and (30 <= int(param) <= 49 or 90 <= int(param) <= 107):
                found.append(param)
    return found


@pytest.fixture
def terminal() -> Iterator[tuple[io.TextIOWrapper, int]]:
    leader, follower = os.openpty()
    out = io.TextIOWrapper(io.FileIO(follower, "w"), write_through=True)
    try:
        yield out, leader
    finally:
        out.close()
        os.close(leader)


def read_all(leader: int) -> str:
    chunks = []
    os.set_blocking(leader, False)
    while True:
        try:
            chunk = os.read(leader, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def table() -> Table:
    board = Table("task", "step")
    board.add_row(Text("worker:0", style="cyan"), Text("12", style="green"))
    return board


@pytest.mark.timeout(20)
def test_no_color_keeps_the_live_table_on_a_terminal_without_colour(
        terminal: tuple[io.TextIOWrapper, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    out, leader = terminal
    console = Console(out=out, err=out)
    assert console.interactive  # the live table is drawn
    with console.live(table):
        console.task_line("worker:0", "step 12")
        console.say("hello")
    console.close()
    shown = read_all(leader)
    assert "worker:0" in shown and "step 12" in shown and "hello" in shown
    assert colours(shown) == []


def test_with_colour_the_same_table_is_coloured(
        terminal: tuple[io.TextIOWrapper, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    out, leader = terminal
    console = Console(out=out, err=out)
    with console.live(table):
        console.task_line("worker:0", "step 12")
    console.close()
    assert colours(read_all(leader))  # the check above can fail


def test_no_color_keeps_the_preflight_table_on_a_terminal(
        terminal: tuple[io.TextIOWrapper, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    assert wants_rich(terminal[0])
