"""Shared fixtures. Tests that start processes use ``tests.jobs`` and always clean up."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
