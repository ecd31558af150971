"""A task started by a warm spare cannot tell it from a cold ``python -m worker.runtime.bootstrap`` start.

Each entrypoint here (one tiny script, run as a module and as a script) writes down what it sees
into ``observed.json`` in its cwd and then does one thing (exit, raise, report, wait). It is run
twice, as the agent runs tasks: cold through ``TaskProcess``, warm through a ``SparePool`` spare that
was started for the previous attempt (another TF_CONFIG, a variable the next launch drops) and
preloaded a marker module the entrypoint imports. Both must see and do exactly the same.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_spare_support import (
    Finished,
    Run,
    nothing_left,
    pool,
    start_cold,
    start_warm,
)
from worker.agent.spares.pool import SparePool
from worker.agent.task_process import STDERR, STDOUT
from worker.wire.protocol import TaskLaunch

__all__ = ["nothing_left", "pool"]  # fixtures

pytestmark = pytest.mark.timeout(60)

MARKER = """\
import os, sys
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "imports.log"), "a") as log:
    log.write(f"{os.getpid()}\\n")
print("marker imported", file=sys.stderr, flush=True)
"""

ENTRY = """\
import ctypes, json, os, signal, stat, sys, threading, time
import marker_mod

def observe():
    handlers = {}
    for number in range(1, signal.NSIG):
        try:
            handler = signal.getsignal(number)
        except (ValueError, OSError):
            continue
        handlers[number] = (handler.name if isinstance(handler, signal.Handlers) else
                            f"{getattr(handler, '__module__', '')}."
                            f"{getattr(handler, '__qualname__', repr(handler))}")
    status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines()
                  if ":\\t" in line)
    report_fd = os.environ.get("TFCLUSTER_REPORT_FD")
    control_fd = os.environ.get("TFCLUSTER_CONTROL_FD")
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    return {
        "argv": sys.argv, "orig_argv": sys.orig_argv, "name": __name__,
        "file": globals().get("__file__"), "spec": __spec__.name if __spec__ else None,
        "package": __package__, "executable": sys.executable, "flags": repr(sys.flags),
        "path": sys.path, "cwd": os.getcwd(),
        "env": [[k, "<fd>" if k in ("TFCLUSTER_REPORT_FD", "TFCLUSTER_CONTROL_FD") else v]
                for k, v in os.environ.items()],
        "c_env": {name: (libc.getenv(name.encode()) or b"").decode() or None
                  for name in ("STALE_ONLY_IN_SPARE", "TF_CONFIG", "TFCLUSTER_SPARE_FD", "LC_CTYPE")},
        "hash": hash("tfcluster"),
        "signals": handlers,
        "sigmasks": {key: status[key].strip() for key in ("SigBlk", "SigIgn", "SigCgt")},
        "threads": [status["Threads"].strip(), threading.active_count()],
        "fds": ["report" if name == report_fd else "control" if name == control_fd else name
                for name in sorted(os.listdir("/proc/self/fd"), key=int)],
        "stdio": [stat.S_IFMT(os.fstat(fd).st_mode) for fd in (0, 1, 2)],
        "streams": [(s.name, s.encoding, s.errors, s.line_buffering)
                    for s in (sys.stdin, sys.stdout, sys.stderr)],
        "session": [os.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid(), os.getppid()],
        "umask": os.umask(0o22),
        "excepthook": f"{sys.excepthook.__module__}.{sys.excepthook.__name__}",
        "modules": sorted(sys.modules),
        "marker": marker_mod.__name__,
    }

def waiting_here():  # one line: the dump names it whether the signal comes before the sleep or in it
    print("waiting", flush=True); time.sleep(60)

with open("observed.json", "w") as out:
    json.dump(observe(), out)
action = sys.argv[1] if len(sys.argv) > 1 else "ok"
print("out line", flush=True)
print("err line", file=sys.stderr, flush=True)
if action == "exit3":
    sys.exit(3)
elif action == "exit-text":
    sys.exit("leaving with a message")
elif action == "raise":
    raise ValueError("boom")
elif action == "os-exit":
    os._exit(7)
elif action == "sigterm":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
elif action == "sigint":
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)
elif action == "thread":
    threading.Thread(target=lambda: (time.sleep(0.2), print("thread done", flush=True))).start()
elif action == "report":
    import worker
    from worker import reporting
    worker.report(5, loss=0.25)
    reporting.send({"kind": "restore_failed", "checkpoint": "ckpt-3"})
elif action == "wait":
    waiting_here()
"""


# --- the two starts of one entrypoint ----------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    workdir: Path
    entry_argv: list[str]

    def launch(self, attempt: int, action: str, **env: str) -> TaskLaunch:
        overlay = {"PYTHONHASHSEED": "123", "TF_CPP_MIN_LOG_LEVEL": "2",
                   "TF_CONFIG": json.dumps({"cluster": {"worker": [f"localhost:{2000 + attempt}"]},
                                            "task": {"type": "worker", "index": 0}}),
                   "TFCLUSTER_TASK": "worker:0", "TFCLUSTER_ATTEMPT": str(attempt), **env}
        return TaskLaunch(task="worker:0",
                          argv=[sys.executable, "-m", "worker.runtime.bootstrap", *self.entry_argv, action],
                          env=overlay, cwd=str(self.workdir))


def make_entry(root: Path, form: str) -> Entry:
    """The entrypoint as a module in its cwd, or as a script in a directory of its own."""
    workdir = root / "work"
    workdir.mkdir(parents=True)
    code_dir = workdir if form == "module" else root / "scripts"
    code_dir.mkdir(exist_ok=True)
    (code_dir / "entry_mod.py").write_text(ENTRY)
    (code_dir / "marker_mod.py").write_text(MARKER)
    argv = ["-m", "entry_mod"] if form == "module" else [str(code_dir / "entry_mod.py")]
    return Entry(workdir, argv)


@dataclass
class Pair:
    cold: Finished
    warm: Finished
    cold_seen: dict[str, Any]
    warm_seen: dict[str, Any]
    cold_pid: int
    warm_pid: int


def run_both(entry: Entry, pool: SparePool, selector: selectors.BaseSelector,
             action: str = "ok", preload: tuple[str, ...] = ("marker_mod",)) -> Pair:
    """The same launch (attempt 1) cold and through a spare filled for attempt 0."""
    observed = entry.workdir / "observed.json"
    cold_run = start_cold(entry.launch(1, action))
    cold = cold_run.finish()
    cold_seen = json.loads(observed.read_text())
    observed.unlink()
    pool.fill([entry.launch(0, action, STALE_ONLY_IN_SPARE="1")], preload)
    warm_run = start_warm(pool, selector, entry.launch(1, action))
    warm = warm_run.finish()
    warm_seen = json.loads(observed.read_text())
    return Pair(cold, warm, cold_seen, warm_seen, cold_run.pid, warm_run.pid)


def without_pids(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "pid": "<pid>"} if "pid" in r else r for r in reports]


@pytest.fixture(params=["module", "script"])
def pair(request: pytest.FixtureRequest, tmp_path: Path,
         pool: tuple[SparePool, selectors.BaseSelector]) -> Pair:
    entry = make_entry(tmp_path, request.param)
    both = run_both(entry, *pool)
    imports = entry.workdir if request.param == "module" else Path(entry.entry_argv[0]).parent
    # the marker was imported by the cold task, and by the spare before its launch (only once)
    assert (imports / "imports.log").read_text().split() == [str(both.cold_pid), str(both.warm_pid)]
    return both


# --- what the entrypoint sees --------------------------------------------------------------------


@pytest.mark.parametrize("seen", ["argv", "orig_argv", "name", "file", "spec", "package",
                                  "executable", "flags"])
def test_argv_and_main_module_are_the_same(pair: Pair, seen: str) -> None:
    assert pair.warm_seen[seen] == pair.cold_seen[seen]
    assert pair.warm_seen["name"] == "__main__"


def test_sys_path_is_the_same_with_no_trace_of_the_spare(pair: Pair) -> None:
    assert pair.warm_seen["path"] == pair.cold_seen["path"]
    assert pair.warm_seen["modules"] == pair.cold_seen["modules"]  # the preload is imported by both
    assert not any("spare" in name for name in pair.warm_seen["modules"])


def test_environ_is_exactly_the_launch_env(pair: Pair) -> None:
    # in the same order too; the spare's own and the previous attempt's variables are gone
    assert pair.warm_seen["env"] == pair.cold_seen["env"]
    assert pair.warm_seen["c_env"] == pair.cold_seen["c_env"]  # what C code sees (getenv)
    assert pair.warm_seen["c_env"]["STALE_ONLY_IN_SPARE"] is None
    assert pair.warm_seen["c_env"]["TFCLUSTER_SPARE_FD"] is None
    assert '"localhost:2001"' in (pair.warm_seen["c_env"]["TF_CONFIG"] or "")
    assert pair.warm_seen["hash"] == pair.cold_seen["hash"]  # PYTHONHASHSEED at start-up


def test_cwd_is_the_same(pair: Pair) -> None:
    assert pair.warm_seen["cwd"] == pair.cold_seen["cwd"]


def test_signal_dispositions_are_those_of_a_fresh_interpreter(pair: Pair) -> None:
    assert pair.warm_seen["signals"] == pair.cold_seen["signals"]
    assert pair.warm_seen["signals"][str(int(signal.SIGTERM))] == "SIG_DFL"
    assert "default_int_handler" in pair.warm_seen["signals"][str(int(signal.SIGINT))]
    # a drill's crash fault raises in a warm task as in a cold one (worker.runtime.crash)
    assert pair.warm_seen["signals"][str(int(signal.SIGPWR))] == "worker.runtime.crash._raise"
    assert pair.warm_seen["sigmasks"] == pair.cold_seen["sigmasks"]  # as the kernel has them


@pytest.mark.parametrize("seen", ["fds", "stdio", "streams", "session", "umask", "threads",
                                  "excepthook"])
def test_process_state_is_the_same(pair: Pair, seen: str) -> None:
    assert pair.warm_seen[seen] == pair.cold_seen[seen]


def test_stdout_and_stderr_are_the_task_pipes(pair: Pair) -> None:
    # the marker's import-time line, written by the spare long before its launch, comes first
    assert pair.cold.stderr == b"marker imported\nerr line\n"
    assert (pair.warm.stdout, pair.warm.stderr) == (pair.cold.stdout, pair.cold.stderr)


def test_the_env_keeps_what_the_interpreter_adds_as_it_starts(
        tmp_path: Path, pool: tuple[SparePool, selectors.BaseSelector]) -> None:
    if {"LC_ALL", "LC_CTYPE"} & set(os.environ):
        pytest.skip("C locale coercion happens only without LC_ALL and LC_CTYPE")
    entry = make_entry(tmp_path, "module")
    observed = entry.workdir / "observed.json"
    start_cold(entry.launch(1, "ok", LANG="C")).finish()
    cold = json.loads(observed.read_text())
    pool[0].fill([entry.launch(0, "ok", LANG="C")], ["marker_mod"])
    start_warm(*pool, entry.launch(1, "ok", LANG="C")).finish()
    warm = json.loads(observed.read_text())
    assert cold["c_env"]["LC_CTYPE"] == "C.UTF-8"  # PEP 538 coercion, in the cold task
    assert (warm["env"], warm["c_env"]) == (cold["env"], cold["c_env"])


# --- what it does ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("action", "code"), [
    ("ok", 0), ("exit3", 3), ("exit-text", 1), ("raise", 1), ("os-exit", 7),
    ("sigterm", -signal.SIGTERM), ("sigint", -signal.SIGINT), ("thread", 0)])
def test_exit_codes_and_what_it_writes_are_the_same(
        tmp_path: Path, pool: tuple[SparePool, selectors.BaseSelector], action: str,
        code: int) -> None:
    both = run_both(make_entry(tmp_path, "script"), *pool, action=action)
    assert (both.cold.exit_code, both.warm.exit_code) == (code, code)
    assert (both.warm.stdout, both.warm.stderr) == (both.cold.stdout, both.cold.stderr)
    assert without_pids(both.warm.report) == without_pids(both.cold.report)
    assert both.warm.report[0] == {"kind": "ready", "pid": both.warm_pid, "stack_dumps": True}


@pytest.mark.parametrize("form", ["module", "script"])
def test_the_traceback_is_relayed_through_the_report_fd_the_same(
        tmp_path: Path, pool: tuple[SparePool, selectors.BaseSelector], form: str) -> None:
    both = run_both(make_entry(tmp_path, form), *pool, action="raise")
    cold_error, warm_error = both.cold.report[-1], both.warm.report[-1]
    assert cold_error["kind"] == warm_error["kind"] == "error"
    assert warm_error["traceback"] == cold_error["traceback"]
    assert warm_error["traceback"].startswith("Traceback (most recent call last):\n  File ")
    assert "entry_mod.py" in warm_error["traceback"]
    assert "worker/" not in warm_error["traceback"]  # launcher frames hidden in both
    assert warm_error["traceback"].encode() in both.warm.stderr  # and printed as usual


def test_reports_reach_the_agent_the_same(
        tmp_path: Path, pool: tuple[SparePool, selectors.BaseSelector]) -> None:
    both = run_both(make_entry(tmp_path, "module"), *pool, action="report")
    assert without_pids(both.warm.report) == without_pids(both.cold.report)
    assert [r["kind"] for r in both.warm.report] == ["ready", "progress", "restore_failed"]
    assert both.warm.report[1] == {"kind": "progress", "step": 5, "metrics": {"loss": 0.25}}


def _stack_dump(run: Run) -> list[str]:
    """SIGUSR1 once it waits; the frames it dumps, launcher frames left out, thread ids masked."""
    run.wait_for(STDOUT, b"waiting\n")
    run.signal(signal.SIGUSR1)
    # the outermost frame, the ``python -c`` line of worker.wire.module_start: the dump is whole
    run.wait_for(STDERR, b'File "<string>", line 1 in <module>')
    run.kill()
    lines = bytes(run.data[STDERR]).decode().splitlines()
    start = next(i for i, line in enumerate(lines) if "(most recent call first)" in line)
    return [re.sub(r"0x[0-9a-f]+", "0x?", line) for line in lines[start:]
            if "/worker/runtime/bootstrap.py" not in line and "/worker/runtime/spare.py" not in line
            and "/worker/runtime/task_entry.py" not in line]


@pytest.mark.parametrize("form", ["module", "script"])
def test_sigusr1_dumps_the_stacks_the_same(
        tmp_path: Path, pool: tuple[SparePool, selectors.BaseSelector], form: str) -> None:
    entry = make_entry(tmp_path, form)
    cold = _stack_dump(start_cold(entry.launch(1, "wait")))
    spares, selector = pool
    spares.fill([entry.launch(0, "wait")], ["marker_mod"])
    warm = _stack_dump(start_warm(spares, selector, entry.launch(1, "wait")))
    assert warm == cold
    assert cold[0].startswith("Current thread 0x? (most recent call first):")
    assert any("entry_mod.py" in line and "in waiting_here" in line for line in warm)
