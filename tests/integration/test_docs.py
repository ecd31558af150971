"""The documentation site: it builds with ``mkdocs build --strict`` (no broken link, no page left
out of the nav, the reference generated), and every script it shows runs as written: shell
snippets on the fake trainer or a tiny script in a sandbox, specs through the validator, Python
at least through the compiler (the one real-TensorFlow snippet: tests/e2e/test_docs_tf.py).
How each block is treated is the marker above it (tests.support.doc_snippets)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.spec.loading import load_spec
from tests.support.doc_snippets import (
    MARKERS,
    SCRIPT_LANGUAGES,
    all_snippets,
    pages,
    replay,
    sandbox_in,
)
from tests.support.jobs import REPO

MKDOCS = Path(sys.executable).parent / "mkdocs"
#: Every `run` block of a page together, seconds.
RUN_TIMEOUT_S = 90
#: The README is a front page: what, install, the five-minute path, links.
README_MAX_LINES = 150


def test_site_builds_strict_with_the_generated_reference(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(site)], cwd=REPO,
                          check=False, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert not re.search(r"^(WARNING|ERROR)", done.stderr, re.M), done.stderr[-3000:]
    for page in ("reference/spec", "reference/cli", "reference/environment", "reference/events",
                 "getting-started", "guides/editor", "concepts"):
        assert (site / page / "index.html").is_file(), page
    spec_page = (site / "reference/spec/index.html").read_text(encoding="utf-8")
    assert "restart.max_restarts" in spec_page and "startup_concurrency" in spec_page


def test_every_script_block_says_how_it_is_tested() -> None:
    found = all_snippets()
    unmarked = [s.where for s in found if s.language in SCRIPT_LANGUAGES and s.marker is None]
    assert not unmarked, f"add a <!-- doc-test: ... --> marker above: {unmarked}"
    wrong = [s.where for s in found if s.marker is not None and s.marker not in MARKERS]
    assert not wrong, f"unknown doc-test markers: {wrong}"
    unexplained = [s.where for s in found if s.marker == "skip" and not s.reason]
    assert not unexplained, f"a skipped block says why: {unexplained}"
    untitled = [s.where for s in found if s.marker == "file" and not s.title]
    assert not untitled, f"a file block needs title=\"NAME\": {untitled}"
    assert len([s for s in found if s.marker == "tf"]) <= 1  # one real-TensorFlow run in all
    assert len([s for s in found if s.marker == "run"]) >= 4


def test_every_python_block_compiles() -> None:
    python = [s for s in all_snippets() if s.language == "python"]
    assert len(python) >= 10
    for snippet in python:
        try:
            ast.parse(snippet.body, snippet.where)
        except SyntaxError as exc:
            pytest.fail(f"{snippet.where}: {exc}")


def test_every_spec_block_is_a_valid_spec(tmp_path: Path) -> None:
    specs = [s for s in all_snippets() if s.marker == "spec" or
             (s.marker == "file" and s.language == "yaml")]
    assert specs
    for position, snippet in enumerate(specs):
        path = tmp_path / f"{position}.yaml"
        path.write_text(snippet.body, encoding="utf-8")
        load_spec(str(path))  # a SpecError names the field


RUN_PAGES = sorted({s.page for s in all_snippets() if s.marker == "run"})


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_shell_snippets_run_as_written(tmp_path: Path, page: Path) -> None:
    sandbox = sandbox_in(tmp_path)
    assert replay(page, sandbox, frozenset({"run"}), RUN_TIMEOUT_S)
    if page.name in ("getting-started.md", "README.md"):  # what the page says happens: worker:1 fails in
        lines = (sandbox / "runs/hello/events.jsonl").read_text(encoding="utf-8").splitlines()
        events = [json.loads(line)["event"] for line in lines]  # attempt 0, attempt 1 succeeds
        assert events.count("job_restarting") == 1
        assert events[-1] == "job_succeeded"


def test_readme_is_a_front_page_whose_links_resolve() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    links = re.findall(r"\]\((?!https?://)([^)#]+)", readme)
    assert any(link.startswith("docs/") for link in links)
    missing = [link for link in links if not (REPO / link).exists()]
    assert not missing, f"README links to missing files: {missing}"
    for page in pages():
        assert page.read_text(encoding="utf-8").startswith("# "), f"{page}: starts with its title"
