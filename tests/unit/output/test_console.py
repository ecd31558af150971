"""What the user sees: ``[task]``-prefixed output lines and ``tfcluster:`` messages on stderr."""

from __future__ import annotations

import io
import re

import pytest

from launcher.output.console import Console

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(autouse=True)
def _no_colour_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)


def console(colour: bool | None = False, show_task_output: bool = True
            ) -> tuple[Console, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Console(out=out, err=err, colour=colour, show_task_output=show_task_output), out, err


@pytest.mark.parametrize(("lines", "expected"), [
    ([("worker:1", "loss 0.5")], ["[worker:1] loss 0.5"]),
    ([("worker:1", "a"), ("chief:0", "b"), ("worker:1", "c")],
     ["[worker:1] a", "[chief:0]  b", "[worker:1] c"]),
    ([("chief:0", "a"), ("worker:10", "b"), ("chief:0", "c"), ("worker:2", "d")],
     ["[chief:0] a", "[worker:10] b", "[chief:0]   c", "[worker:2]  d"]),
    ([("evaluator:0", "x"), ("worker:0", "")], ["[evaluator:0] x", "[worker:0]    "]),
    ([("worker:0", "  indented\ttext [not a label]")],
     ["[worker:0]   indented\ttext [not a label]"]),
])
def test_task_lines_are_prefixed_and_aligned(lines: list[tuple[str, str]],
                                             expected: list[str]) -> None:
    shown, out, err = console()
    for task, line in lines:
        shown.task_line(task, line)
    assert out.getvalue() == "".join(f"{line}\n" for line in expected)
    assert err.getvalue() == ""


def test_once_every_task_was_seen_the_text_starts_in_one_column() -> None:
    shown, out, _ = console()
    tasks = ["chief:0", "worker:0", "worker:11", "evaluator:0"]
    for task in tasks:
        shown.task_line(task, "first")
    for task in tasks:
        shown.task_line(task, "second")
    later = out.getvalue().splitlines()[len(tasks):]
    assert {line.index("second") for line in later} == {len("[evaluator:0] ")}
    assert [line.split("]")[0] + "]" for line in later] == [f"[{t}]" for t in tasks]


def test_no_colour_means_no_escape_codes() -> None:
    shown, out, err = console(colour=False)
    shown.task_line("worker:1", "hello")
    shown.say("saying")
    shown.warn("warning")
    shown.error("failing")
    assert "\x1b" not in out.getvalue()
    assert "\x1b" not in err.getvalue()


def test_colour_wraps_only_the_label() -> None:
    shown, out, _ = console(colour=True)
    shown.task_line("worker:1", "hello \x1b is kept")
    shown.task_line("chief:0", "hi")
    coloured = out.getvalue().splitlines()
    assert all(line.startswith("\x1b[") for line in coloured)
    assert [ANSI.sub("", line) for line in coloured] == ["[worker:1] hello \x1b is kept",
                                                         "[chief:0]  hi"]
    assert coloured[0].endswith(" hello \x1b is kept")


def colour_of(task: str) -> str:
    shown, out, _ = console(colour=True)
    shown.task_line(task, "x")
    found = ANSI.match(out.getvalue())
    assert found is not None
    return found.group(0)


@pytest.mark.parametrize(("one", "other"), [
    ("worker:0", "worker:1"),
    ("chief:0", "worker:0"),
    ("evaluator:0", "worker:1"),
])
def test_tasks_get_different_colours(one: str, other: str) -> None:
    assert colour_of(one) != colour_of(other)


def test_a_task_keeps_its_colour() -> None:
    shown, out, _ = console(colour=True)
    for line in ("a", "b"):
        shown.task_line("worker:3", line)
        shown.task_line("worker:4", line)
    codes = [m.group(0) for line in out.getvalue().splitlines() if (m := ANSI.match(line))]
    assert len(codes) == 4
    assert codes[0] == codes[2] != codes[1] == codes[3]


@pytest.mark.parametrize(("method", "text", "expected"), [
    ("say", "restarting", ["tfcluster: restarting"]),
    ("warn", "skipping checkpoint", ["tfcluster: skipping checkpoint"]),
    ("error", "Root cause: worker:1\n  | Traceback\n  | ValueError",
     ["tfcluster: Root cause: worker:1", "tfcluster:   | Traceback", "tfcluster:   | ValueError"]),
    ("say", "", ["tfcluster: "]),
])
def test_tfcluster_messages_go_to_stderr_prefixed(method: str, text: str,
                                                  expected: list[str]) -> None:
    shown, out, err = console()
    getattr(shown, method)(text)
    assert err.getvalue() == "".join(f"{line}\n" for line in expected)
    assert out.getvalue() == ""


def test_hidden_task_output_still_shows_tfcluster_messages() -> None:
    shown, out, err = console(show_task_output=False)
    shown.task_line("worker:0", "noise")
    shown.warn("worker:0 failed")
    assert out.getvalue() == ""
    assert err.getvalue() == "tfcluster: worker:0 failed\n"


def test_hidden_task_output_does_not_widen_the_labels() -> None:
    shown, out, _ = console()
    shown.show_task_output = False
    shown.task_line("evaluator:0", "hidden")
    shown.show_task_output = True
    shown.task_line("worker:0", "shown")
    assert out.getvalue() == "[worker:0] shown\n"


@pytest.mark.parametrize(("env", "coloured"), [
    ({}, False),  # a StringIO is not a terminal
    ({"FORCE_COLOR": "1"}, True),
    ({"NO_COLOR": "1"}, False),
    ({"NO_COLOR": "1", "FORCE_COLOR": "1"}, False),  # NO_COLOR wins
])
def test_colour_by_default_follows_the_environment(env: dict[str, str], coloured: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    shown, out, err = console(colour=None)
    shown.task_line("worker:0", "x")
    shown.say("y")
    assert ("\x1b" in out.getvalue()) is coloured
    assert ("\x1b" in err.getvalue()) is coloured
    assert ANSI.sub("", out.getvalue()) == "[worker:0] x\n"
    assert ANSI.sub("", err.getvalue()) == "tfcluster: y\n"
