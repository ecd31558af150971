"""The environment a process has fixed for good by the time it has imported its heavy modules.

The interpreter reads ``PYTHON*`` (hash seed, buffering, paths, UTF-8 mode), the locale and ``HOME``
(the user site directory) as it starts; the dynamic loader and libc read ``LD_*``, ``MALLOC_*`` and
``GLIBC_TUNABLES`` before ``main``; TensorFlow fixes its logging, oneDNN, device and thread-pool
settings as it is imported. A warm spare (:mod:`worker.runtime.spare`) has done all of that before it learns
its launch's env, so it may only become a task whose env agrees with its own on every variable
named here (:func:`differences`); any other variable it simply takes from the launch.

tfcluster's own variables (``TF_CONFIG``, ``TFCLUSTER_*``) change with every attempt and are never
read at import: they are never import-time, whatever their name.
"""

from __future__ import annotations

from collections.abc import Mapping

from worker.wire import env

#: Variables read at start-up or import, by name.
IMPORT_TIME_NAMES = frozenset({
    # TensorFlow, at import
    "TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE", "TF_ENABLE_ONEDNN_OPTS",
    "TF_USE_LEGACY_KERAS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
    "CUDA_VISIBLE_DEVICES", "KERAS_BACKEND", "KERAS_HOME",
    # thread pools of the math libraries, fixed when they load
    "OMP_NUM_THREADS",
    # the interpreter: which one ``python`` is, its user site dir, locale and time zone
    "PATH", "HOME", "LANG", "LANGUAGE", "TZ",
    # the C library, before main
    "GLIBC_TUNABLES",
})
#: Variables read at start-up or import, by prefix (``PYTHON`` covers ``PYTHONHASHSEED``,
#: ``PYTHONPATH``, ``PYTHONUNBUFFERED``, ...).
IMPORT_TIME_PREFIXES = ("PYTHON", "LD_", "MALLOC_", "LC_", "TF_CPP_", "TF_XLA_", "XLA_", "CUDA_",
                        "OMP_", "KMP_", "MKL_", "OPENBLAS_")


def is_import_time(name: str) -> bool:
    """Whether a process has fixed the variable ``name`` by the time its imports are done."""
    if name == env.TF_CONFIG or name.startswith(env.OWN_PREFIX):
        return False
    return name in IMPORT_TIME_NAMES or name.startswith(IMPORT_TIME_PREFIXES)


def import_time(environ: Mapping[str, str]) -> dict[str, str]:
    """The import-time part of ``environ``."""
    return {name: value for name, value in environ.items() if is_import_time(name)}


def differences(started_with: Mapping[str, str], wanted: Mapping[str, str]) -> list[str]:
    """The import-time variables set differently (or set in only one) in two environments, by
    name only (their values may be secrets), sorted."""
    a, b = import_time(started_with), import_time(wanted)
    return sorted(name for name in a.keys() | b.keys() if a.get(name) != b.get(name))
