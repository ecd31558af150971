"""A benchmarked task's way in: note when the interpreter reached the entrypoint and when a heavy
module had been imported, then run the real entrypoint as ``python -m MODULE`` / ``python SCRIPT``
would (same ``sys.argv``, and ``sys.path[0]`` of the real entrypoint)::

    python benchmarks/tasks/timed_entry.py IMPORT (-m MODULE | SCRIPT) [ARGS...]

Under tfcluster it runs as the task's script (behind ``worker.runtime.bootstrap``, or in a warm spare that
has just been handed its launch, which may have imported IMPORT already). With ``BENCH_TIMING_DIR``
set it writes ``<dir>/<attempt>-<type>-<index>.json``: ``process_started`` (the kernel's start time
of this process; a warm spare started before its attempt did), ``entered`` and ``imported``
(``time.time()``), the module, and whether it was imported before this script ran.
"""

from __future__ import annotations

import time

ENTERED = time.time()

import importlib  # noqa: E402  (after the first time stamp, on purpose)
import json  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import sys  # noqa: E402

TIMING_DIR = "BENCH_TIMING_DIR"
USAGE = "usage: timed_entry.py IMPORT (-m MODULE | SCRIPT) [ARGS...]"


def process_started() -> float | None:
    """When this process started, on the ``time.time()`` clock (from /proc; None elsewhere)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/stat", encoding="ascii") as handle:
            btime = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime


def record(module: str, preloaded: bool, imported: float) -> None:
    directory = os.environ.get(TIMING_DIR)
    if not directory:
        return
    task = os.environ.get("TFCLUSTER_TASK", "worker:0").replace(":", "-")
    attempt = os.environ.get("TFCLUSTER_ATTEMPT", "0")
    path = os.path.join(directory, f"{attempt}-{task}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump({"process_started": process_started(), "entered": ENTERED,
                   "imported": imported, "module": module, "preloaded": preloaded}, handle)
    os.replace(path + ".tmp", path)


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1:] == ["-m"]:
        sys.exit(USAGE)
    module, entry = argv[0], argv[1:]
    preloaded = module in sys.modules
    importlib.import_module(module)
    record(module, preloaded, time.time())
    if entry[0] == "-m":
        sys.argv = [entry[1], *entry[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(entry[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(entry)
        sys.path[0] = os.path.dirname(os.path.abspath(entry[0]))
        runpy.run_path(entry[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
