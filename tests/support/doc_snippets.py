"""The code blocks of the documentation (``docs/**/*.md``) and what the tests do with each.

Every fenced block of a script language (``sh``, ``bash``, ``python``, ``yaml``, ``json``) must be
preceded by a marker comment saying how the docs tests treat it:

- ``<!-- doc-test: run -->`` (sh): run as written by ``bash -e`` in the page's sandbox;
- ``<!-- doc-test: tf -->`` (sh): the same, under real TensorFlow (tests/e2e, one such block in all);
- ``<!-- doc-test: file -->`` (with ``title="NAME"``): written to the sandbox as NAME, for the
  page's later blocks to run (python is compiled, a YAML spec validated);
- ``<!-- doc-test: spec -->`` (yaml): a complete spec, validated (and written when titled);
- ``<!-- doc-test: skip: WHY -->``: shown only (python still compiles): WHY says what it needs.

A page's sandbox is a fresh directory holding links to the repository's ``cluster_specs`` and
``tests`` (so the fake trainer imports), where the page's blocks are replayed in order.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from tests.support.jobs import REPO

DOCS = REPO / "docs"
#: Languages whose blocks must say how they are tested.
SCRIPT_LANGUAGES = frozenset({"sh", "bash", "python", "yaml", "json"})
MARKERS = frozenset({"run", "tf", "file", "spec", "skip"})

_FENCE = re.compile(r"^(?P<indent> *)(?P<ticks>```+)(?P<lang>[\w-]*)(?P<info>.*)$")
_MARKER = re.compile(r"^\s*<!-- doc-test: (?P<kind>[\w-]+)(?::\s*(?P<why>.*?))?\s*-->\s*$")
_TITLE = re.compile(r'title="(?P<title>[^"]+)"')


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    title: str | None
    marker: str | None
    reason: str | None
    body: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def pages() -> list[Path]:
    """Every Markdown page of the docs (generated reference pages are not in docs/), and the
    README, the front page."""
    return [*sorted(DOCS.rglob("*.md")), REPO / "README.md"]


def snippets(page: Path) -> list[Snippet]:
    """The fenced code blocks of ``page`` in order, with the marker just above each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Snippet] = []
    row = 0
    while row < len(lines):
        opening = _FENCE.match(lines[row])
        if not opening:
            row += 1
            continue
        indent, ticks = opening["indent"], opening["ticks"]
        end = row + 1
        while end < len(lines) and lines[end].rstrip() != indent + ticks:
            end += 1
        body = textwrap.dedent("\n".join(lines[row + 1:end])) + "\n"
        marker = reason = None
        above = row - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        if above >= 0 and (match := _MARKER.match(lines[above])):
            marker, reason = match["kind"], match["why"]
        title = _TITLE.search(opening["info"])
        found.append(Snippet(page, row + 1, opening["lang"], title["title"] if title else None,
                             marker, reason, body))
        row = end + 1
    return found


def all_snippets() -> list[Snippet]:
    return [snippet for page in pages() for snippet in snippets(page)]


def sandbox_in(tmp_path: Path) -> Path:
    """A directory like a clone's root for the snippets: the specs and the fake trainer."""
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    for name in ("cluster_specs", "tests"):
        (sandbox / name).symlink_to(REPO / name)
    return sandbox


def replay(page: Path, sandbox: Path, run: frozenset[str], timeout: float) -> list[Snippet]:
    """Write the page's file blocks into ``sandbox`` and run its blocks marked in ``run``, in
    the page's order, as written (``bash -e``, tfcluster's virtualenv first on PATH)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    ran = []
    for snippet in snippets(page):
        if snippet.title and snippet.marker in ("file", "spec"):
            (sandbox / snippet.title).write_text(snippet.body, encoding="utf-8")
        if snippet.marker in run:
            code, out = _bash(snippet.body, sandbox, env, timeout)
            assert code == 0, f"{snippet.where} exited {code}:\n{out[-4000:]}"
            ran.append(snippet)
    return ran


def _bash(script: str, cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run ``script`` with ``bash -e`` in a session of its own: on a time-out the whole session
    (tfcluster and its tasks) is killed, and the test fails saying so."""
    with subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True) as bash:
        try:
            out, _ = bash.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(bash.pid, signal.SIGKILL)
            out, _ = bash.communicate()
            return -1, f"{out}\n(timed out after {timeout:g} s)"
    return bash.returncode, out
