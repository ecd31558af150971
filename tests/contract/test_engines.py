"""The contract every engine passes (STYLE 15; ARCHITECTURE.md, "Adding an engine"), run over the
fake engine, this machine, a real sshd and a real Slurm cluster (``rig``, tests/contract/conftest):

1. ``place`` puts every task on a host it lists, the same way when asked again, and still validly
   after an attempt that lost a host;
2. ``start_agent`` with attempt 0's launch: every task reports Started, its stdout line as Output,
   then Exited 0; closing each agent ends its output with exactly one AgentClosed;
3. Terminate is confirmed by Terminated with every task exited; close leaves no process of the
   job, and closing again is safe;
4. an agent killed (or lost) reaches the sink as exactly one AgentClosed, and after close no task
   of its is left;
5. ``probe`` reports every host of the plan, each ok.

Waits are on the agents' events with deadlines (simulated time for the fake engine).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from launcher.backends.base import AgentEvent
from launcher.plan.placement import Placement
from launcher.spec.model import ClusterSpec
from tests.contract.harness import CLOSE_S, LINE, Job, Past, Program, Rig, closings, messages
from worker.wire.protocol import Exited, Output, Started, Terminate, Terminated

pytestmark = pytest.mark.timeout(90)

#: How long the agents have for what a test waits for (their start: srun, SSH, a Python start).
SAY_S = 30.0
#: How long the tasks of a lost agent may outlive it (DESIGN: no orphans).
NO_ORPHANS_S = 5.0
#: The grace period of a Terminate: the tasks end at the TERM, long before it is over.
GRACE_S = 5.0


def assert_valid(spec: ClusterSpec, placement: Placement) -> None:
    hosts = [h.name for h in placement.hosts]
    assert len(set(hosts)) == len(hosts), f"a host listed twice: {hosts}"
    placed = [str(t.task) for t in placement.tasks]
    assert sorted(placed) == sorted(str(slot.task) for slot in spec.task_slots())
    for task in placement.tasks:
        assert task.host in hosts, f"{task.task} on {task.host}, which is not listed"


def every_task(job: Job, kind: type) -> Callable[[list[AgentEvent]], bool]:
    """Whether every task of ``job`` sent a message of ``kind``."""
    return lambda events: {m.task for m in messages(events, kind)} >= set(job.tasks)


def every_host_closed(job: Job) -> Callable[[list[AgentEvent]], bool]:
    return lambda events: all(closings(events, host) for host in job.hosts)


def assert_one_closed_per_host(rig: Rig, job: Job) -> None:
    assert rig.wait(every_host_closed(job), SAY_S), f"not every agent's output ended: " \
        f"{rig.recorder.events}"
    for host in job.hosts:
        assert len(closings(rig.recorder.events, host)) == 1, closings(rig.recorder.events, host)


def test_place_puts_every_task_on_a_listed_host_every_time(rig: Rig) -> None:
    spec = rig.spec(Program.PRINT)
    backend = rig.backend(spec)
    placement = backend.place(spec, [])
    assert_valid(spec, placement)
    assert backend.place(spec, []) == placement
    lost = Past(attempt=0, lost_hosts=frozenset({placement.hosts[0].name}))
    assert_valid(spec, backend.place(spec, [lost]))


def test_started_agents_run_every_task_to_exit_0_with_its_output(rig: Rig) -> None:
    job = rig.launch(Program.PRINT)
    assert rig.wait(every_task(job, Exited), SAY_S), rig.recorder.events
    events = rig.recorder.events
    for host in job.plan.hosts:
        started = {m.task for m in messages(events, Started, host.name)}
        assert started == {str(t.task) for t in host.tasks}, f"{host.name}: {events}"
    for task in job.tasks:
        said = [m for m in messages(events, Started) + messages(events, Exited) if m.task == task]
        assert [type(m) for m in said] == [Started, Exited], said
        exited = said[1]
        assert (exited.exit_code, exited.signal, exited.error) == (0, None, None), exited
        lines = [m.line for m in messages(events, Output) if m.task == task]
        assert LINE in lines, f"{task} said {lines}"
    for handle in job.handles.values():
        assert handle.close(CLOSE_S) == [], f"{handle.host}: close had to kill"
    assert_one_closed_per_host(rig, job)


def test_terminate_is_confirmed_and_close_leaves_no_process(rig: Rig) -> None:
    job = rig.launch(Program.SLEEP)
    assert rig.wait(every_task(job, Started), SAY_S), rig.recorder.events
    assert rig.left(), "the sleeping tasks are not found"
    for handle in job.handles.values():
        handle.send(Terminate(grace_period_s=GRACE_S))
    assert rig.wait(lambda events: all(messages(events, Terminated, host) for host in job.hosts),
                    SAY_S), rig.recorder.events
    events = rig.recorder.events
    assert {m.task for m in messages(events, Exited)} == set(job.tasks)
    for handle in job.handles.values():
        handle.close(CLOSE_S)
    assert rig.left() == []
    assert_one_closed_per_host(rig, job)
    for handle in job.handles.values():
        assert handle.close(CLOSE_S) == [], f"{handle.host}: closed twice, killed something"
    assert_one_closed_per_host(rig, job)


def test_a_lost_agent_is_one_agent_closed_and_leaves_no_task(rig: Rig) -> None:
    job = rig.launch(Program.SLEEP)
    assert rig.wait(every_task(job, Started), SAY_S), rig.recorder.events
    rig.lose_agents(job)
    assert rig.wait(every_host_closed(job), SAY_S), rig.recorder.events
    for handle in job.handles.values():
        handle.close(CLOSE_S)
    assert rig.wait_none_left(NO_ORPHANS_S) == []
    assert_one_closed_per_host(rig, job)


def test_probe_reports_every_host_of_the_plan_ok(rig: Rig) -> None:
    spec = rig.spec(Program.PRINT)
    backend = rig.backend(spec)
    preview = rig.planner(spec, backend).preview()
    report = backend.probe(preview)
    assert [h.host for h in report.hosts] == [h.name for h in preview.hosts]
    assert report.ok, [(h.host, h.problems, h.details) for h in report.hosts]
