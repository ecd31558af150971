"""What a run directory keeps of its spec (``spec.json``), for ``tfcluster run --resume``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.spec.model import ClusterSpec

#: The version of ``spec.json``'s layout.
STORED_SPEC_FORMAT = 1


def stored_spec(spec: ClusterSpec, base_dir: str) -> dict[str, Any]:
    """What ``spec.json`` holds: the validated spec and the directory its paths are relative to."""
    return {"format": STORED_SPEC_FORMAT, "job": spec.name, "base_dir": base_dir,
            # unset fields stay unset: a default deadline must not become an explicit one
            "spec": spec.model_dump(mode="json", exclude_unset=True)}
