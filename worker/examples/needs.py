"""What the bundled examples need beyond tfcluster itself, and the one line that says how to get it.

``pip install 'tfcluster[tf]'`` brings TensorFlow (the CPU build where one exists), scikit-learn
(the digits data) and TensorBoard. tf_keras (Keras 2, for ``model.fit`` under a distribution
strategy) is not in it: tf_keras requires the package named ``tensorflow``, which would install the
full build beside ``tensorflow-cpu``; it comes with ``tfcluster[tf-gpu]``, or on its own with
``--no-deps``.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from types import ModuleType


def tensorflow_version() -> str | None:
    """The installed TensorFlow distribution's ``major.minor`` (either build), if any."""
    for distribution in ("tensorflow-cpu", "tensorflow"):
        try:
            return ".".join(metadata.version(distribution).split(".")[:2])
        except metadata.PackageNotFoundError:
            continue
    return None


def install_hint(module: str) -> str:
    """The command that installs ``module`` for the examples."""
    if module == "tf_keras":
        version = tensorflow_version() or "<your TensorFlow's major.minor>"
        return (f"pip install --no-deps 'tf_keras=={version}.*' (--no-deps keeps your TensorFlow "
                "build alone), or pip install 'tfcluster[tf-gpu]'")
    if module.startswith("sklearn"):
        return "pip install 'tfcluster[tf]' (or: pip install scikit-learn)"
    return "pip install 'tfcluster[tf]'"


def need(module: str) -> ModuleType:
    """``import module``, or exit with one line naming what is missing and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is None or not module.startswith(exc.name.split(".")[0]):
            raise  # the module is there but something it imports is broken: show that
        raise SystemExit(f"this example needs {exc.name.split('.')[0]}, which is not installed: "
                         f"{install_hint(module)}") from None


if __name__ == "__main__":  # `python -m worker.examples.needs`: the TensorFlow's major.minor (Makefile)
    print(tensorflow_version() or "")
