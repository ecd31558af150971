"""Runs on every host. This top level is the training API a script imports (``worker.context()``,
``worker.report()``, ``worker.save_model``, ``worker.termination_config()``, and the modules
``checkpointing``, ``preemption``, ``keras``, ``data``, ``accumulation``, ...); the rest is in
subpackages: ``worker.agent`` (the host agent, ``python -m worker.agent``), ``worker.runtime``
(what runs in each task before its code) and ``worker.wire`` (what the coordinator shares with
the worker, the only part ``launcher`` imports).

Importing this package never imports TensorFlow and never imports ``launcher``. ``context`` and
``report`` are loaded on first use, so the agent and every task start without paying for them;
``termination_config`` (TensorFlow's PreemptionCheckpointHandler under tfcluster) imports TF only
when it is called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from worker.wire.version import TFCLUSTER_VERSION

#: tfcluster's version (pre-flight reads it: a ``worker`` without it is not tfcluster's).
__version__ = TFCLUSTER_VERSION

if TYPE_CHECKING:
    from worker.reporting import report
    from worker.saving import save_model
    from worker.task_context import TaskContext, context
    from worker.termination import termination_config

__all__ = ["TaskContext", "__version__", "context", "report", "save_model", "termination_config"]

_LAZY = {"TaskContext": "worker.task_context", "context": "worker.task_context",
         "report": "worker.reporting", "termination_config": "worker.termination",
         "save_model": "worker.saving"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'worker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
