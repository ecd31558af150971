"""Every generated page of the documentation: path under ``docs/`` -> Markdown. The site's build
adds them (``docs/hooks/reference.py``); ``python -m launcher.reference.pages DIR`` writes them
to DIR to read or diff without building the site."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def _spec() -> str:
    from launcher.reference.spec_page import render
    from launcher.spec.schema import spec_json_schema

    return render(spec_json_schema())


def _cli() -> str:
    from launcher.cli.parser import build_parser
    from launcher.reference.cli_page import render

    return render(build_parser())


def _contracts() -> str:
    from launcher.reference.contracts_page import render

    return render()


def _events() -> str:
    from launcher.reference.events_page import render

    return render()


#: Where each generated page goes under ``docs/`` (mkdocs.yml's nav names them).
PAGES: dict[str, Callable[[], str]] = {
    "reference/spec.md": _spec,
    "reference/cli.md": _cli,
    "reference/environment.md": _contracts,
    "reference/events.md": _events,
}


def reference_pages() -> dict[str, str]:
    """Every generated page, rendered now from the code."""
    return {path: render() for path, render in PAGES.items()}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m launcher.reference.pages OUTPUT_DIR", file=sys.stderr)
        return 2
    for path, page in reference_pages().items():
        target = Path(argv[0]) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page, encoding="utf-8")
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
