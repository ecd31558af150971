"""MkDocs hook: add the reference pages generated from the code (launcher.reference) to the site,
so that they are written anew by every build and never stored in docs/."""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files

from launcher.reference.pages import reference_pages


def on_files(files: Files, config: Any) -> Files:
    for path, page in reference_pages().items():
        files.append(File.generated(config, path, content=page))
    return files
