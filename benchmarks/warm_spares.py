"""Whether this build of tfcluster has warm spares: does ``tfcluster validate`` accept a spec with
``restart.warm_spares: true``, and ``entrypoint.preload`` (what each spare imports before it waits)?
Unknown fields are rejected, so a build without them says so, with exit code 2. How much warm
spares save when a plain MWMS script is killed early (8, 12, 20, 33 s after its start) is
``early_kills.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import REPO, Tfcluster, scratch, write_spec

VALIDATE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Probe:
    available: bool  # restart.warm_spares is accepted
    preload: bool  # entrypoint.preload is accepted too
    detail: str  # what validate said about restart.warm_spares (its first line), for the record

    def overrides(self, heavy_import: str) -> dict[str, Any]:
        """What a spec adds to restart from warm spares that import ``heavy_import`` (when the
        build lets a spec say what they import; otherwise they import its default)."""
        if self.preload:
            return {"restart": {"warm_spares": True}, "entrypoint": {"preload": [heavy_import]}}
        return {"restart": {"warm_spares": True}}


def validate(cli: Tfcluster, tmp: Path, extra: dict[str, Any]) -> tuple[bool, str]:
    """Whether ``tfcluster validate`` accepts a small spec with ``extra``, and its first line."""
    entrypoint = {"module": "worker.examples.digits", **extra.pop("entrypoint", {})}
    spec = {"name": "warm-spares-probe", "entrypoint": entrypoint, "workdir": str(REPO),
            "tasks": [{"type": "worker", "host": "localhost", "count": 2}], **extra}
    with scratch(tmp, "probe-") as work:
        path = write_spec(work, spec)
        run = cli.run(["validate", str(path)], work, timeout_s=VALIDATE_TIMEOUT_S)
    said = (run.stderr.strip() or run.stdout.strip()).replace(f"{path}: ", "").splitlines()
    first = said[0] if said else f"exit code {run.exit_code}"
    return run.exit_code == 0, first if len(said) <= 1 else f"{first} (+{len(said) - 1} more)"


def probe(cli: Tfcluster, tmp: Path) -> Probe:
    available, detail = validate(cli, tmp, {"restart": {"warm_spares": True}})
    preload = available and validate(cli, tmp, {"restart": {"warm_spares": True},
                                                "entrypoint": {"preload": ["json"]}})[0]
    return Probe(available, preload, detail)
