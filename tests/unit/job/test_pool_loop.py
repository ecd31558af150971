"""The job loop with a host pool (``placement:``), in memory and simulated time: a spare takes a
lost host's place, the job shrinks to ``min_workers`` and grows back when the host returns, a host
that keeps failing is left out and readmitted, and too few hosts end the job with one line.

The same behaviour with real hosts (network namespaces with sshd) is in tests/netns/test_pool.py.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from launcher.cli.start import planner_for
from launcher.job.coordinator import Coordinator, JobResult
from launcher.job.seams import LoopSeams
from launcher.job.state import JobState
from launcher.output.console import Console
from launcher.plan.ports import PortAllocator
from launcher.run.directory import RunDir
from launcher.run.event_log import read_events
from launcher.spec.loading import spec_from_dict
from tests.support.fake_backend import FakeBackend, FakeWorld, SimClock, SimInbox, TaskScript, run_inline
from worker.wire.protocol import Launch

HOSTS = {f"h{i}": {"address": f"198.18.7.{i}"} for i in (1, 2, 3)}
UNREACHABLE = "unreachable: connection timed out"


@dataclass
class Run:
    result: JobResult
    world: FakeWorld
    events: list[dict[str, Any]]
    err: str

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    def placements(self) -> list[dict[str, str]]:
        return [e["placement"] for e in self.of("attempt_placed")]

    def launch_env(self, attempt: int, name: str) -> dict[str, str]:
        for sent in self.world.sent:
            message = sent.message
            if isinstance(message, Launch) and message.attempt == attempt:
                for task in message.tasks:
                    if task.task == name:
                        return task.env
        raise KeyError((attempt, name))


def pool_spec(pool: list[str], workers: int = 1, **placement: Any) -> dict[str, Any]:
    return {"name": "pool", "entrypoint": {"command": ["train"]},
            "hosts": {name: HOSTS[name] for name in pool},
            "tasks": [{"type": "chief"}] + ([{"type": "worker", "count": workers}] if workers
                                            else []),
            "placement": {"hosts": pool, **placement},
            "restart": {"max_restarts": 3, "backoff_s": 1.0}}


Event = Callable[[FakeWorld], None]


def lose(host: str, *, for_good: bool = True) -> Event:
    """The host's agent is lost (its link went down); ``for_good``: it stays unreachable."""
    def happen(world: FakeWorld) -> None:
        if for_good:
            world.failing_hosts[host] = UNREACHABLE
        world.agents[host].lose("lost contact with its agent: connection reset")
    return happen


def back(host: str) -> Event:
    def happen(world: FakeWorld) -> None:
        world.failing_hosts.pop(host, None)
    return happen


def run(tmp_path: Path, data: dict[str, Any], scripts: Callable[[int, str], TaskScript],
        timeline: dict[float, Event] | None = None) -> Run:
    clock = SimClock()
    inbox = SimInbox(clock)
    world = FakeWorld(clock=clock, inbox_for=lambda: inbox, scripts=scripts)
    for offset, happen in (timeline or {}).items():
        def fire(happen: Event = happen) -> None:
            happen(world)
        inbox.at(clock.now + offset, fire)  # type: ignore[arg-type]
    run_dir = RunDir(tmp_path / "run")
    backend = FakeBackend(world)
    spec = spec_from_dict(data)
    planner = planner_for(spec, backend, str(run_dir.path), str(tmp_path))
    err = io.StringIO()
    coordinator = Coordinator(planner, run_dir, backend, Console(out=io.StringIO(), err=err,
                                                                 colour=False),
                              seams=LoopSeams(clock=clock, new_inbox=lambda: inbox,
                                              spawn=run_inline,
                                              ports=PortAllocator(lock_dir=str(tmp_path / "p"))))
    result = coordinator.run()
    return Run(result, world, read_events(run_dir.events), err.getvalue())


def steps(n: int) -> Callable[[int, str], TaskScript]:
    return lambda attempt, task: TaskScript(steps=n, step_s=0.1)


def test_a_spare_takes_the_place_of_a_host_lost_for_good(tmp_path: Path) -> None:
    job = run(tmp_path, pool_spec(["h1", "h2", "h3"]), steps(50), {0.5: lose("h2")})

    assert job.result is not None and job.result.state is JobState.SUCCEEDED
    assert job.placements() == [{"chief:0": "h1", "worker:0": "h2"},
                                {"chief:0": "h1", "worker:0": "h3"}]
    left, = job.of("host_left_out")
    assert (left["host"], left["attempt"], left["reason"]) == ("h2", 1, "its agent was lost")
    assert [e["workers"] for e in job.of("attempt_placed")] == [2, 2]
    assert job.of("attempt_placed")[0]["spares"] == ["h3"]
    assert job.of("attempt_placed")[1]["left_out"] == {"h2": "its agent was lost"}
    assert not job.of("job_resized")
    assert "attempt 1 uses spare host(s) h3" in job.err
    assert job.launch_env(1, "worker:0")["TFCLUSTER_NUM_WORKERS"] == "2"


def test_without_a_spare_the_job_shrinks_to_min_workers_then_grows_back(tmp_path: Path) -> None:
    data = pool_spec(["h1", "h2"], min_workers=1, readmit_after_s=10.0)
    job = run(tmp_path, data, steps(400), {0.5: lose("h2"), 8.0: back("h2")})

    assert job.result is not None and job.result.state is JobState.SUCCEEDED
    assert [e["workers"] for e in job.of("attempt_placed")] == [2, 1, 2]
    assert job.placements()[1] == {"chief:0": "h1"}
    assert job.launch_env(1, "chief:0")["TFCLUSTER_NUM_WORKERS"] == "1"
    assert job.launch_env(1, "chief:0")["TFCLUSTER_MAX_WORKERS"] == "2"
    shrink, grow = job.of("job_resized")
    assert (shrink["workers"], shrink["previous_workers"]) == (1, 2)
    assert (grow["workers"], grow["previous_workers"]) == (2, 1)
    readmitted, = job.of("host_readmitted")
    assert readmitted["host"] == "h2"
    # the grow-back restart: a graceful stop, outside the budget, soon after readmit_after_s
    _, growing = job.of("job_restarting")
    assert growing["counts_against_budget"] is False
    assert "restarting the job at full size" in growing["reason"]
    left_at = job.of("host_left_out")[0]["ts"]
    assert 10.0 <= growing["ts"] - left_at <= 10.0 + 5.0 + 1.0
    assert job.result.attempts[1].status.value == "resized"
    assert "attempt 1 runs 1 of 2 workers (was 2): no spare for h2" in job.err


def test_a_host_failing_twice_in_a_row_is_left_out_and_readmitted_later(
        tmp_path: Path) -> None:
    def scripts(attempt: int, task: str) -> TaskScript:
        if attempt in (0, 1) and task == "worker:0":  # on h2: a file missing only there
            return TaskScript(steps=2, exit_code=2)
        if attempt == 2 and task == "worker:0":  # on the spare h3: then h3 breaks
            return TaskScript(steps=2, exit_code=2)
        return TaskScript(steps=30)

    data = pool_spec(["h1", "h2", "h3"], exclude_after_failures=2, readmit_after_s=5.0)
    data["restart"]["crash_loop_attempts"] = None
    job = run(tmp_path, data, scripts)

    assert job.result is not None and job.result.state is JobState.SUCCEEDED
    assert [p["worker:0"] for p in job.placements()] == ["h2", "h2", "h3", "h2"]
    left = [(e["host"], e["reason"]) for e in job.of("host_left_out")]
    assert left == [("h2", "2 attempts in a row failed on it")]
    assert [e["host"] for e in job.of("host_readmitted")] == ["h2"]


def test_below_min_workers_with_nothing_back_the_job_fails_naming_the_host(
        tmp_path: Path) -> None:
    data = pool_spec(["h1", "h2"], wait_for_hosts_s=30.0)
    data["checkpoint"] = {"dir": str(tmp_path / "ckpt")}
    job = run(tmp_path, data, steps(400), {0.5: lose("h2")})

    assert job.result is not None and job.result.state is JobState.FAILED
    assert job.result.exit_code == 1
    assert job.result.reason == ("too few usable hosts: 1 of the 2 the job needs at its "
                                 "smallest (h2: its agent was lost)")
    failed, = job.of("job_failed")
    assert failed["reason"] == job.result.reason and failed["exit_code"] == 1
    assert "waiting up to 30s for hosts to come back" in job.err
    waited = failed["ts"] - job.of("host_left_out")[0]["ts"]
    assert 30.0 <= waited <= 36.0
    assert job.world.agents_closed == job.world.agents_started  # nothing left running
    assert (tmp_path / "run" / "summary.json").exists()


def test_a_spare_that_fails_its_probe_is_left_out_before_it_is_used(tmp_path: Path) -> None:
    def spare_dead(world: FakeWorld) -> None:
        world.failing_hosts["h2"] = "python3: not found"
    job = run(tmp_path, pool_spec(["h1", "h2", "h3"], workers=0, min_workers=1),
              steps(50), {0.2: spare_dead, 0.5: lose("h1")})

    assert job.result is not None and job.result.state is JobState.SUCCEEDED
    reasons = {e["host"]: e["reason"] for e in job.of("host_left_out")}
    assert reasons["h1"] == "its agent was lost"
    assert reasons["h2"] == "its probe failed: python3: not found"
    assert job.placements() == [{"chief:0": "h1"}, {"chief:0": "h3"}]


@pytest.mark.parametrize(("placement", "problem"), [
    ({"hosts": ["h1", "h9"]}, "placement.hosts[1]: 'h9' is not declared under hosts"),
    ({"hosts": ["h1"]}, "placement.hosts: 1 host(s) hold 1 x 1 task(s), but the spec has 2"),
    ({"hosts": ["h1", "h1"]}, "placement.hosts: lists a host twice"),
    ({"hosts": ["h1", "h2"], "min_workers": 3}, "placement.min_workers: must be at most the 2"),
    ({"hosts": ["h1", "h2"], "spares": 1}, "placement.spares: is for Slurm allocations"),
])
def test_bad_pools_name_the_field(placement: dict[str, Any], problem: str) -> None:
    from launcher.spec.errors import SpecError

    data = pool_spec(["h1", "h2"])
    data["placement"] = placement
    with pytest.raises(SpecError) as caught:
        spec_from_dict(data)
    assert problem in str(caught.value)


def test_the_keeper_probes_hosts_through_the_engine_without_any_task(tmp_path: Path) -> None:
    """A real probe (this machine's) of a pool's hosts before they are used: no task, no port,
    no checkpoint dir; a host whose interpreter is missing fails it with the reason."""
    import sys

    from launcher.backends.engine import EngineOptions
    from launcher.backends.local.engine import LocalBackend
    from launcher.job.pool_keeper import PoolKeeper
    from launcher.plan.placement import PlacedHost
    from launcher.plan.pool import HostPool

    data = {"name": "probe", "entrypoint": {"command": ["train"]},
            "tasks": [{"type": "chief"}], "placement": {"hosts": ["localhost"]}}
    spec = spec_from_dict(data)
    backend = LocalBackend(spec, EngineOptions(python=sys.executable, base_dir=str(tmp_path)))
    keeper = PoolKeeper(HostPool(spec, backend.pool(spec)), backend, job="probe",
                        console=Console(out=io.StringIO(), err=io.StringIO(), colour=False),
                        emit=lambda event: None, clock=SimClock())
    good = backend.pool(spec)[0]
    bad = PlacedHost(name="broken", address="localhost", local=True,
                     python=str(tmp_path / "no-python"), resolves_paths=True, where="local")
    failing = keeper.probe([good, bad])
    assert set(failing) == {"broken"}
    assert "no-python" in failing["broken"]


def test_summary_and_status_show_each_attempts_placement(tmp_path: Path) -> None:
    import json

    from launcher.output.run_status import status_lines

    run(tmp_path, pool_spec(["h1", "h2", "h3"]), steps(50), {0.5: lose("h2")})
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    pool = summary["pool"]
    assert pool["hosts"] == ["h1", "h2", "h3"]
    assert [(a["workers"], a["placement"], a["spares"], a["left_out"]) for a in pool["attempts"]] \
        == [(2, {"chief:0": "h1", "worker:0": "h2"}, ["h3"], {}),
            (2, {"chief:0": "h1", "worker:0": "h3"}, [], {"h2": "its agent was lost"})]
    assert [a["workers"] for a in summary["attempts"]] == [2, 2]
    lines = status_lines(tmp_path / "run")
    assert "  2 of 2 workers: chief:0@h1, worker:0@h2; spares h3" in lines
    assert "  2 of 2 workers: chief:0@h1, worker:0@h3; left out h2 (its agent was lost)" in lines
