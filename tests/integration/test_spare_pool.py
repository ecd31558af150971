"""The pool's side of warm spares: a spare that does not fit its launch, died, failed its import or
is not ready is never used, and says why; a closed pool leaves no process behind and never signals
a stranger; each spare's memory is told."""

from __future__ import annotations

import os
import select
import selectors
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.test_agent_pid_reuse import NS_LAST_PID, spawn_with_pid
from tests.integration.test_spare_support import (
    DEADLINE_S,
    nothing_left,
    pool,
    start_cold,
    start_warm,
    wait_settled,
)
from tests.support.tiers import require
from tests.support.waiting import wait_until
from worker.agent.spares import import_env
from worker.agent.spares.pool import (
    READY_MARGIN_S,
    NoSpare,
    Spare,
    SpareLaunchError,
    SparePool,
    SpareState,
)
from worker.agent.task_process import SpawnError, TaskProcess
from worker.wire.protocol import TaskLaunch

__all__ = ["nothing_left", "pool"]  # fixtures

pytestmark = pytest.mark.timeout(60)

Pool = tuple[SparePool, selectors.BaseSelector]


def task_in(tmp_path: Path, code: str = "print('hello', flush=True)\n", name: str = "worker:0",
            **env: str) -> TaskLaunch:
    script = tmp_path / f"task-{name.replace(':', '-')}.py"
    script.write_text(code)
    return TaskLaunch(task=name, argv=[sys.executable, "-m", "worker.runtime.bootstrap", str(script)],
                      env=env, cwd=str(tmp_path))


def module_in(tmp_path: Path, name: str, code: str) -> str:
    (tmp_path / f"{name}.py").write_text(code)
    return name


def wait_gone(pid: int, timeout: float = DEADLINE_S) -> None:
    """Until ``pid`` (our child) has exited, zombie or not (or already reaped by the pool)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        assert poller.poll(timeout * 1000), f"{pid} did not end within {timeout}s"
    finally:
        os.close(pidfd)


def is_our_process(pid: int) -> bool:
    """``pid`` is a child of this test, reaped or not."""
    try:
        return psutil.Process(pid).ppid() == os.getpid()
    except psutil.Error:
        return False


def ready_spare(pool: Pool, task: TaskLaunch, preload: tuple[str, ...] = ("json",)) -> Spare:
    spares, selector = pool
    spares.fill([task], preload)
    assert wait_settled(spares, selector, task.task) is SpareState.READY
    return spares.spares[task.task]


# --- the import-time env ------------------------------------------------------------------------


def test_the_import_time_env_is_one_named_list() -> None:
    for name in ("TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS",
                 "CUDA_VISIBLE_DEVICES", "TF_USE_LEGACY_KERAS", "OMP_NUM_THREADS",
                 "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "PYTHONHASHSEED",
                 "PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "MALLOC_ARENA_MAX", "LC_ALL"):
        assert import_env.is_import_time(name), name
    for name in ("TF_CONFIG", "TFCLUSTER_ATTEMPT", "TFCLUSTER_RESUME_CHECKPOINT", "DATA_DIR"):
        assert not import_env.is_import_time(name), name
    assert import_env.differences({"OMP_NUM_THREADS": "1", "TF_CONFIG": "a", "X": "1"},
                                       {"TF_CONFIG": "b"}) == ["OMP_NUM_THREADS"]


@pytest.mark.parametrize(("at_fill", "at_launch"), [
    ({"TF_CPP_MIN_LOG_LEVEL": "0"}, {"TF_CPP_MIN_LOG_LEVEL": "2"}),
    ({"PYTHONHASHSEED": "1"}, {"PYTHONHASHSEED": "2"}),
    ({"OMP_NUM_THREADS": "4"}, {}),  # set for the spare, gone from the launch
    ({}, {"CUDA_VISIBLE_DEVICES": "secret-value-0"}),
    ({"MALLOC_ARENA_MAX": "2"}, {"MALLOC_ARENA_MAX": "4"}),
    ({"LD_LIBRARY_PATH": "/nonexistent/a"}, {"LD_LIBRARY_PATH": "/nonexistent/b"}),
])
def test_a_spare_whose_import_time_env_differs_is_discarded_and_says_so(
        tmp_path: Path, pool: Pool, at_fill: dict[str, str], at_launch: dict[str, str]) -> None:
    spare = ready_spare(pool, task_in(tmp_path, **at_fill))
    launch = task_in(tmp_path, **at_launch)
    got = pool[0].take(launch)
    assert isinstance(got, NoSpare)
    (name,) = {*at_fill, *at_launch}
    assert got.reason.endswith(f"was discarded: the launch's import-time env differs in {name}")
    assert "secret-value" not in got.reason  # names only: values may be secrets
    wait_gone(spare.pid)  # killed
    assert pool[0].pids() <= {spare.pid}  # reaped now or by close(), never used
    # the task starts cold, and is fine
    assert start_cold(launch).finish().stdout == b"hello\n"


def test_a_launch_with_another_interpreter_or_cwd_gets_no_spare(tmp_path: Path, pool: Pool) -> None:
    task = task_in(tmp_path)
    ready_spare(pool, task)
    other = TaskLaunch(task=task.task, argv=[os.path.realpath(sys.executable) + "-x", *task.argv[1:]],
                       env={}, cwd=task.cwd)
    if other.argv[0] == task.argv[0]:
        pytest.skip("no second name for this interpreter")
    got = pool[0].take(other)
    assert isinstance(got, NoSpare) and "the launch's interpreter is" in got.reason
    ready_spare(pool, task)
    (tmp_path / "elsewhere").mkdir()
    got = pool[0].take(TaskLaunch(task=task.task, argv=task.argv, env={},
                                  cwd=str(tmp_path / "elsewhere")))
    assert isinstance(got, NoSpare) and "the launch's cwd is" in got.reason


def test_a_task_that_is_not_bootstrapped_gets_no_spare(tmp_path: Path, pool: Pool) -> None:
    command = TaskLaunch(task="worker:0", argv=["/bin/sh", "-c", "echo hi"], env={},
                         cwd=str(tmp_path))
    events = pool[0].fill([command], ["json"])
    assert [e.text for e in events] == ["no spare: it is not started as "
                                        "`python -m worker.runtime.bootstrap ...`"]
    assert pool[0].fill([command], ["json"]) == []  # said once
    got = pool[0].take(command)
    assert isinstance(got, NoSpare) and "not started as `python -m worker.runtime.bootstrap" in got.reason


# --- broken spares fall back to a cold start ---------------------------------------------------


def test_a_spare_that_died_is_not_used(tmp_path: Path, pool: Pool) -> None:
    task = task_in(tmp_path)
    spare = ready_spare(pool, task)
    os.kill(spare.pid, signal.SIGKILL)  # our unreaped child: surely the spare
    wait_gone(spare.pid)
    got = pool[0].take(task)
    assert isinstance(got, NoSpare)
    assert got.reason.startswith(f"its spare {spare.pid} ")
    assert got.reason.endswith("(killed by SIGKILL)")
    assert pool[0].pids() == set()  # reaped by the pool
    assert start_cold(task).finish().stdout == b"hello\n"


def test_a_spare_the_agent_reaped_is_not_used(tmp_path: Path, pool: Pool) -> None:
    task = task_in(tmp_path)
    spare = ready_spare(pool, task)
    os.kill(spare.pid, signal.SIGTERM)
    _, status = os.waitpid(spare.pid, 0)  # as the agent's waitpid(-1) would
    assert pool[0].reaped(spare.pid, status)
    assert not pool[0].reaped(spare.pid, status)  # told once is enough; no longer a spare
    got = pool[0].take(task)
    assert isinstance(got, NoSpare)
    assert got.reason == f"its spare {spare.pid} died before its launch (killed by SIGTERM)"


@pytest.mark.parametrize(("code", "error"), [
    (None, "cannot import 'no_such_module_here': ModuleNotFoundError: No module named "
           "'no_such_module_here'"),
    ("raise RuntimeError('broken at import')\n",
     "cannot import 'bad_mod': RuntimeError: broken at import"),
    ("import sys\nsys.exit(5)\n", "cannot import 'bad_mod': SystemExit: 5"),
])
def test_a_spare_that_failed_its_import_is_not_used(tmp_path: Path, pool: Pool, code: str | None,
                                                    error: str) -> None:
    name = "no_such_module_here" if code is None else module_in(tmp_path, "bad_mod", code)
    task = task_in(tmp_path)
    spares, selector = pool
    spares.fill([task], ["json", name])
    assert wait_settled(spares, selector, task.task) is SpareState.FAILED
    got = spares.take(task)
    assert isinstance(got, NoSpare)
    assert error in got.reason
    assert start_cold(task).finish().stdout == b"hello\n"


def test_a_spare_not_ready_yet_is_discarded(tmp_path: Path, pool: Pool) -> None:
    task = task_in(tmp_path)
    slow = module_in(tmp_path, "stuck_mod", "import time\ntime.sleep(600)\n")
    pool[0].fill([task], [slow])
    spare = pool[0].spares[task.task]
    got = pool[0].take(task)
    assert isinstance(got, NoSpare)
    assert "was not ready yet (still importing after" in got.reason
    wait_gone(spare.pid)


def test_a_spare_nearly_done_importing_is_waited_for_one_far_from_it_is_not(
        tmp_path: Path, pool: Pool) -> None:
    """With imports expected to take 2 s of CPU: a spare past 1 s of CPU into an import of
    about 1.2 s (half or less left) is waited for and used; one on a stuck import that uses no
    CPU (however long ago it started) is discarded at once."""
    spares = pool[0]
    spares.import_hint_s = 2.0
    near, far = task_in(tmp_path, name="worker:0"), task_in(tmp_path, name="worker:1")
    spin = "import time\nwhile time.process_time() < 1.2:\n    pass\n"
    spares.fill([near], [module_in(tmp_path, "spinning_mod", spin)])
    spares.fill([far], [module_in(tmp_path, "stuck_mod", "import time\ntime.sleep(600)\n")])
    waiting = spares.spares[near.task]
    wait_until(lambda: (waiting.cpu_s() or 0.0) >= 1.0, DEADLINE_S, "1 s of CPU imported")
    asked = time.monotonic()
    assert isinstance(spares.take(near), Spare)
    assert time.monotonic() - asked < 1.0 + READY_MARGIN_S
    stuck = spares.spares[far.task]
    asked = time.monotonic()
    got = spares.take(far)
    assert isinstance(got, NoSpare) and "still importing" in got.reason
    assert time.monotonic() - asked < 0.5
    wait_gone(stuck.pid)


def test_a_spare_that_refuses_its_launch_falls_back_to_a_cold_start(tmp_path: Path,
                                                                     pool: Pool) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    task = task_in(tmp_path)
    task = TaskLaunch(task=task.task, argv=task.argv, env={}, cwd=str(workdir))
    spare = ready_spare(pool, task)
    workdir.rmdir()  # the cwd is gone by the time of the launch
    got = pool[0].take(task)
    assert isinstance(got, Spare)
    with pytest.raises(SpareLaunchError, match=r"refused its launch: .*No such file or directory"):
        pool[0].launch(got, task)
    wait_gone(spare.pid)
    # the cold start it falls back to fails as a bad launch fails, naming the missing workdir
    with pytest.raises(SpawnError, match=r"its workdir .*/work does not exist on this host"):
        TaskProcess(task).start()


def test_a_spare_that_does_not_answer_its_launch_is_killed_before_any_task_code_runs(
        tmp_path: Path, nothing_left: None) -> None:
    selector = selectors.DefaultSelector()
    spares = SparePool(selector, launch_timeout_s=0.3)
    try:
        task = task_in(tmp_path, "open('ran', 'w').close()\n")
        spare = ready_spare((spares, selector), task)
        got = spares.take(task)
        assert isinstance(got, Spare)
        os.kill(spare.pid, signal.SIGSTOP)  # it cannot answer; given up without the timeout
        with pytest.raises(SpareLaunchError, match=r"stopped \(SIGSTOP\) before it answered"):
            spares.launch(got, task)
        wait_gone(spare.pid)
        assert not (tmp_path / "ran").exists()
    finally:
        spares.close()


def test_a_spare_is_launched_once(tmp_path: Path, pool: Pool) -> None:
    task = task_in(tmp_path)
    ready_spare(pool, task)
    run = start_warm(*pool, task)
    assert run.finish().stdout == b"hello\n"
    got = pool[0].take(task)
    assert isinstance(got, NoSpare) and got.reason == "no spare was started for it"


def test_a_spare_given_back_is_killed(tmp_path: Path, pool: Pool) -> None:
    task = task_in(tmp_path)
    ready_spare(pool, task)
    got = pool[0].take(task)
    assert isinstance(got, Spare)
    pool[0].give_back(got)
    wait_gone(got.pid)
    with pytest.raises(SpareLaunchError, match="was not taken from this pool"):
        pool[0].launch(got, task)


# --- filling ------------------------------------------------------------------------------------


def test_fill_keeps_a_fitting_spare_and_replaces_one_that_no_longer_fits(tmp_path: Path,
                                                                          pool: Pool) -> None:
    task = task_in(tmp_path, TF_CONFIG="attempt 0")
    first = ready_spare(pool, task)
    assert pool[0].fill([task_in(tmp_path, TF_CONFIG="attempt 1")], ["json"]) == []
    assert pool[0].spares[task.task] is first
    events = pool[0].fill([task], ["json", "decimal"])  # other preloads
    assert [e.state for e in events] == [SpareState.DISCARDED, SpareState.STARTING]
    wait_gone(first.pid)
    assert wait_settled(*pool, task.task) is SpareState.READY
    assert pool[0].spares[task.task].modules == ("json", "decimal")


def test_each_spare_tells_its_memory(tmp_path: Path, pool: Pool) -> None:
    spares, selector = pool
    tasks = [task_in(tmp_path, name=f"worker:{i}") for i in range(2)]
    spares.fill(tasks, ["decimal"])
    ready = []
    deadline = time.monotonic() + DEADLINE_S
    while len(ready) < 2 and time.monotonic() < deadline:
        for key, _ in selector.select(deadline - time.monotonic()):
            ready.extend(e for e in spares.on_readable(int(key.fd)) if e.state is SpareState.READY)
    assert sorted(e.task for e in ready) == ["worker:0", "worker:1"]
    for event in ready:
        assert event.rss_bytes is not None and event.rss_bytes > 1 << 20
        assert "MiB RSS, imported decimal" in event.text
    usage = spares.usage()
    assert set(usage) == {"worker:0", "worker:1"} and min(usage.values()) > 1 << 20


# --- closing ------------------------------------------------------------------------------------


def test_a_closed_pool_leaves_no_process_behind(tmp_path: Path, pool: Pool) -> None:
    spares, selector = pool
    stuck = module_in(tmp_path, "stuck_mod", "import time\ntime.sleep(600)\n")
    ready_spare(pool, task_in(tmp_path, name="worker:0"))
    taken_task = task_in(tmp_path, name="worker:1")
    ready_spare(pool, taken_task)
    taken = spares.take(taken_task)
    assert isinstance(taken, Spare)
    spares.fill([task_in(tmp_path, name="worker:2")], [stuck])  # never ready
    pids = spares.pids()
    assert len(pids) == 3
    killed = spares.close()
    assert sorted(killed) == sorted(pids)
    assert not [pid for pid in pids if is_our_process(pid)]  # gone and reaped
    assert spares.pids() == set() and spares.close() == []  # safe to call again
    assert not selector.get_map()  # every channel unregistered


def test_a_spare_reaped_behind_the_pools_back_is_never_signalled_once_a_stranger_has_its_pid(
        tmp_path: Path, pool: Pool) -> None:
    require(os.geteuid() == 0 and NS_LAST_PID.exists(),
            "forcing pid reuse through /proc/sys/kernel/ns_last_pid needs root")
    task = task_in(tmp_path)
    spare = ready_spare(pool, task)
    os.kill(spare.pid, signal.SIGKILL)
    os.waitpid(spare.pid, 0)  # reaped, and the pool is not told
    signals_file = tmp_path / "stranger-signals"
    stranger = spawn_with_pid(spare.pid, signals_file)
    try:
        got = pool[0].take(task)
        assert isinstance(got, NoSpare)
        pool[0].close()
        caught = signals_file.read_text().split() if signals_file.exists() else []
        assert (stranger.poll(), caught) == (None, [])
    finally:
        stranger.kill()
        stranger.wait()
