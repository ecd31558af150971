"""Engines: where a job's agents run. Each is the module (or package) ``launcher.backends.<name>``
(``local``, ``ssh``, a scheduler's), found by the spec's engine name (``ClusterSpec.engine``) and
imported on first use, so that a run pays only for its own (paramiko for SSH, a scheduler's
client for its engine). See
:mod:`launcher.backends.engine` for what an engine provides, and ARCHITECTURE.md ("Adding an
engine")."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from launcher.backends.engine import (
        Backend,
        EngineModule,
        EngineOptions,
        LocateLostHost,
        Submitter,
    )
    from launcher.spec.model import ClusterSpec


def engine_module(name: str) -> EngineModule:
    """The engine ``name``'s module (ImportError for an engine tfcluster does not have)."""
    return cast("EngineModule", importlib.import_module(f"{__name__}.{name}"))


def create_backend(spec: ClusterSpec, options: EngineOptions) -> Backend:
    """The engine that runs ``spec``, for one run."""
    return engine_module(spec.engine).create(spec, options)


def submitter_for(spec: ClusterSpec) -> Submitter | None:
    """The engine's :class:`~launcher.backends.engine.Submitter`; None if it schedules nothing
    for later (it runs where tfcluster runs)."""
    make = getattr(engine_module(spec.engine), "submitter", None)
    return None if make is None else cast("Submitter", make())


def host_loss_for(spec: ClusterSpec) -> LocateLostHost | None:
    """How a drill takes one of the engine's hosts away for good (``lose-host``), when the engine
    knows how (a scheduler's node); None: the drill finds the host itself (a namespace host)."""
    return cast("LocateLostHost | None", getattr(engine_module(spec.engine),
                                                  "locate_lost_host", None))
