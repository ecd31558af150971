"""What the tests of files opened in shared places share: a victim's file to aim planted names at."""

from __future__ import annotations

from pathlib import Path

import pytest

VICTIM_TEXT = "a victim's file\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of someone else's, which nothing tfcluster does may change or print."""
    path = tmp_path / "victim"
    path.write_text(VICTIM_TEXT)
    return path
