"""Keeping secrets out of what tfcluster prints: env values whose names look secret are masked."""

from __future__ import annotations

import re
from collections.abc import Mapping

_SECRET_NAME = re.compile(r"(SECRET|TOKEN|PASSW|PASSWD|PASSWORD|API_?KEY|PRIVATE|CREDENTIAL|AUTH)",
                          re.IGNORECASE)
MASK = "***"


def looks_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def masked(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if looks_secret(k) else v) for k, v in env.items()}
