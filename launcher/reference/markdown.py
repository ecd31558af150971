"""Markdown pieces the reference pages share: tables whose cells are safe to put anything in."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Iterable, Sequence

#: A notice on top of every generated page (and what the docs test looks for).
GENERATED = ("!!! note \"Generated from the code\"\n    This page is written by "
             "`launcher.reference` from {source} each time the docs are built: edit the code, "
             "not this page.\n")


def text(value: str) -> str:
    """Plain text for a table cell: no HTML, no column break, one line."""
    escaped = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return " ".join(escaped.replace("|", "\\|").split())


def code(value: str) -> str:
    """``value`` as inline code in a table cell (backticks inside are kept apart)."""
    value = " ".join(value.split()).replace("|", "\\|")
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table (cells already escaped with :func:`text` or :func:`code`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def comments_above(source: str) -> dict[str, str]:
    """For each assignment in ``source`` (a module or one class), the ``#:`` comment lines just
    above it, joined: the Sphinx convention this code base documents its names with."""
    lines = source.splitlines()
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr]
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Assign):
            targets = list(node.targets)
        else:
            continue
        for target in targets:
            if not isinstance(target, ast.Name):
                continue
            above: list[str] = []
            row = node.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#:"):
                above.insert(0, lines[row].strip()[2:].strip())
                row -= 1
            if above:
                found[target.id] = plain(" ".join(above))
    return found


_ROLE = re.compile(r":(?:mod|data|func|class|meth|attr):`~?([^`]+)`")


def plain(doc: str) -> str:
    """reST as Markdown: ````x```` and ``:mod:`x``` as ```x```."""
    return _ROLE.sub(r"`\1`", doc.replace("``", "`"))


def class_comments(cls: type) -> dict[str, str]:
    """:func:`comments_above` of one class's body."""
    return comments_above(textwrap.dedent(inspect.getsource(cls)))


def docstring(obj: object) -> str:
    """The object's own docstring as one paragraph of Markdown (reST's ````x```` as ```x```)."""
    doc = inspect.getdoc(obj) or ""
    return " ".join(plain(doc).split())
