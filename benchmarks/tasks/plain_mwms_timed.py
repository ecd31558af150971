"""A plain MultiWorkerMirroredStrategy script for ``warm_spares.py``: it imports nothing of tfcluster
and knows only TF_CONFIG and its arguments, as ``tests/support/plain_mwms.py`` (which it runs), and
the benchmark's ``BENCH_TIMING_DIR``: the first time each process finishes a training step it
appends ``<time.time()> <pid>`` to ``<dir>/<type>-<index>.steps``, the moment it trains again after
a restart (the script itself says nothing tfcluster could see: no ``worker.report``)::

    python benchmarks/tasks/plain_mwms_timed.py --checkpoint-dir DIR [plain_mwms.py's options]
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
from pathlib import Path

PLAIN = Path(__file__).resolve().parents[2] / "tests" / "support" / "plain_mwms.py"


def stamp_first_step() -> None:
    """Wrap ``tf.function`` so that the first call of the training step notes the time."""
    import tensorflow as tf

    directory = os.environ.get("BENCH_TIMING_DIR")
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    name = f"{task.get('type', 'worker')}-{task.get('index', 0)}"
    original = tf.function

    def function(*args: object, **kwargs: object) -> object:
        made = original(*args, **kwargs)
        if not directory:
            return made
        noted: list[bool] = []

        def first(*call_args: object, **call_kwargs: object) -> object:
            result = made(*call_args, **call_kwargs)
            if not noted:
                noted.append(True)
                with open(os.path.join(directory, f"{name}.steps"), "a") as out:
                    out.write(f"{time.time()} {os.getpid()}\n")
            return result

        return first

    tf.function = function


if __name__ == "__main__":
    stamp_first_step()
    sys.argv = [str(PLAIN), *sys.argv[1:]]
    runpy.run_path(str(PLAIN), run_name="__main__")
