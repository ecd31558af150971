"""Taking hosts away and giving them back, with scripted hosts and a scripted Slurm: the Slurm
node's commands, :class:`HostLosses` (heal timers, the watch that keeps a node lost, everything
given back at the end), and the injector's ``lose-host`` / ``heal`` events."""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from launcher.backends.slurm.node_loss import SlurmNodeLoss
from launcher.drill.faults import parse_faults
from launcher.drill.host_loss import Healed, HostLossError, HostLosses
from launcher.drill.injector import FaultInjector, resolve
from launcher.errors import TfclusterError
from launcher.job.tasks import TaskState
from launcher.run.events import Event, FaultInjected

WAIT_S = 10.0  # deadline for a timer or the watch to act (they act in milliseconds)

# --- a Slurm node ----------------------------------------------------------------------------------

STEPS = ("4242.batch|batch|n1\n"
         "4242.extern|extern|n2\n"
         "4242.0|tfcluster-digits|n1\n"
         "4242.1|tfcluster-digits|n2\n"
         "4242.2|interactive|n2\n"
         "4242.3|tfcluster-digits|n2\n")


@dataclass
class Slurm:
    """Slurm's client commands, scripted: the job's steps, and whether node n2 is drained."""

    steps: str = STEPS
    drained: bool = False
    ran: list[list[str]] = field(default_factory=list)

    def __call__(self, argv: Sequence[str]) -> str:
        self.ran.append(list(argv))
        if argv[0] == "squeue":
            return self.steps
        if argv[:2] == ["scontrol", "update"]:
            self.drained = argv[-1] != "state=resume"
        if argv[:3] == ["scontrol", "show", "node"]:
            return f"NodeName=n2 State={'MIXED+DRAIN' if self.drained else 'MIXED'}\n"
        return ""


def test_a_node_is_drained_and_only_its_agent_steps_are_killed() -> None:
    slurm = Slurm()
    node = SlurmNodeLoss("n2", "4242", "tfcluster-digits", slurm)
    assert node.take_down() == "slurm node n2 drained, agent step 4242.1, 4242.3 killed"
    assert slurm.ran == [
        ["scontrol", "update", "nodename=n2", "state=drain", "reason=tfcluster-drill"],
        ["squeue", "--steps", "--jobs=4242", "--noheader", "--format=%i|%j|%N"],
        ["scancel", "--signal=KILL", "4242.1", "4242.3"]]
    assert node.bring_back() == "slurm node n2 resumed"
    assert slurm.ran[-2:] == [["scontrol", "show", "node", "-o", "n2"],
                              ["scontrol", "update", "nodename=n2", "state=resume"]]
    # again: Slurm refuses to resume a node that is not drained, so it is left as it is
    assert node.bring_back() == "slurm node n2 not drained (State=MIXED): left as it is"
    assert slurm.ran[-1] == ["scontrol", "show", "node", "-o", "n2"]


def test_a_node_without_an_agent_step_is_drained_all_the_same() -> None:
    slurm = Slurm(steps="4242.batch|batch|n1\n")
    node = SlurmNodeLoss("n2", "4242", "tfcluster-digits", slurm)
    assert node.take_down() == "slurm node n2 drained (no agent step of the job ran there)"
    assert node.enforce() == []
    assert [argv[0] for argv in slurm.ran] == ["scontrol", "squeue", "squeue"]  # no scancel


# --- HostLosses -------------------------------------------------------------------------------------


@dataclass
class FakeHost:
    """A host whose state is a flag; ``enforced`` is set each time the watch looks at it."""

    down: bool = False
    fail_back: bool = False
    fail_down: bool = False  # goes down, then the rest of taking it down fails
    changes: list[str] = field(default_factory=list)
    enforced: threading.Event = field(default_factory=threading.Event)

    def take_down(self) -> str:
        self.down = True
        self.changes.append("down")
        if self.fail_down:
            raise TfclusterError("squeue --steps failed (exit 1): slurmctld busy")
        return "down"

    def enforce(self) -> list[str]:
        self.enforced.set()
        return []

    def bring_back(self) -> str:
        if self.fail_back:
            raise TfclusterError("ip: permission denied")
        self.down = False
        self.changes.append("up")
        return "up"


def wait_healed(losses: HostLosses) -> list[Healed]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if found := losses.healed():
            return found
        threading.Event().wait(0.01)
    raise AssertionError("no heal within the deadline")


def test_a_heal_gives_the_host_back_on_its_own_timer() -> None:
    host = FakeHost()
    losses = HostLosses({"h2": host})
    try:
        assert losses.lose("h2") == "down" and losses.is_lost("h2")
        losses.heal_after("h2", 0.05)
        healed, = wait_healed(losses)
        assert (healed.host, healed.detail, healed.ok) == ("h2", "up", True)
        assert healed.at <= time.time() and not losses.is_lost("h2") and not host.down
    finally:
        assert losses.restore_all() == []
    assert host.changes == ["down", "up"]  # given back once: restore_all had nothing left to do
    assert losses.healed() == []


def test_the_end_gives_back_every_lost_host_and_cancels_the_heals() -> None:
    hosts = {"h2": FakeHost(), "h3": FakeHost(), "h4": FakeHost()}
    losses = HostLosses(dict(hosts))
    losses.lose("h2")
    losses.lose("h3")
    losses.heal_after("h2", 3600.0)
    assert losses.restore_all() == []
    assert [h.changes for h in hosts.values()] == [["down", "up"], ["down", "up"], []]
    assert losses.healed() == []  # the end is no heal: heal:h2 was never injected
    assert losses.restore_all() == []  # safe to call again
    with pytest.raises(HostLossError, match="the drill is over"):
        losses.lose("h4")
    assert not hosts["h4"].down


def test_a_host_that_cannot_be_given_back_is_named_and_the_others_still_are() -> None:
    hosts = {"h2": FakeHost(fail_back=True), "h3": FakeHost()}
    losses = HostLosses(dict(hosts))
    losses.lose("h2")
    losses.lose("h3")
    assert losses.restore_all() == ["h2 could not be given back: ip: permission denied"]
    assert not hosts["h3"].down


def test_a_host_half_taken_down_is_given_back_at_the_end() -> None:
    host = FakeHost(fail_down=True)
    losses = HostLosses({"h2": host})
    with pytest.raises(TfclusterError, match="slurmctld busy"):
        losses.lose("h2")
    assert losses.restore_all() == [] and host.changes == ["down", "up"]


def test_a_failed_heal_is_reported_as_not_ok_and_the_host_stays_lost() -> None:
    host = FakeHost(fail_back=True)
    losses = HostLosses({"h2": host})
    losses.lose("h2")
    losses.heal_after("h2", 0.0)
    healed, = wait_healed(losses)
    assert (healed.ok, healed.detail) == (False, "ip: permission denied")
    assert losses.is_lost("h2")
    host.fail_back = False
    assert losses.restore_all() == [] and not host.down


def test_the_watch_keeps_a_lost_host_lost() -> None:
    host = FakeHost()
    losses = HostLosses({"h2": host}, watch_s=0.01)
    try:
        losses.lose("h2")
        assert host.enforced.wait(WAIT_S)
    finally:
        losses.restore_all()


# --- the injector -----------------------------------------------------------------------------------

TASKS = {"chief:0": "localhost", "worker:0": "localhost", "worker:1": "h2"}


@dataclass
class Task:
    state: TaskState = TaskState.RUNNING


@dataclass
class Control:
    """What the attempt offers a hook, scripted."""

    attempt: int = 0
    tasks: dict[str, Task] = field(default_factory=lambda: {t: Task() for t in TASKS})
    started_at: float = 100.0
    first_progress_at: float | None = None
    sent: list[tuple[str, signal.Signals]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    said: list[str] = field(default_factory=list)

    def signal_task(self, task: str, sig: signal.Signals) -> str | None:
        self.sent.append((task, sig))
        return TASKS[task]

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def warn(self, text: str) -> None:
        self.said.append(text)


@dataclass
class Loser:
    """A scripted HostLoser: what was lost, the heals armed, the heals to report."""

    lost: list[str] = field(default_factory=list)
    armed: list[tuple[str, float]] = field(default_factory=list)
    done: list[Healed] = field(default_factory=list)
    broken: bool = False

    def lose(self, host: str) -> str:
        if self.broken:
            raise TfclusterError("ip: permission denied")
        self.lost.append(host)
        return f"{host} down until healed"

    def heal_after(self, host: str, after_s: float) -> None:
        self.armed.append((host, after_s))

    def healed(self) -> list[Healed]:
        done, self.done = self.done, []
        return done


def injector(*texts: str, loser: Loser) -> FaultInjector:
    return FaultInjector(resolve(parse_faults(texts, "f", "t"), TASKS, 0), host_loser=loser)


def test_lose_host_fires_at_its_step_and_arms_its_heal() -> None:
    loser = Loser()
    hook, control = injector("lose-host:h2:at-step=10", "heal:h2:after=30", loser=loser), Control()
    hook.on_progress(control, "chief:0", 9)
    assert loser.lost == []
    hook.on_progress(control, "chief:0", 10)
    assert loser.lost == ["h2"] and loser.armed == [("h2", 30.0)]
    assert control.sent == []  # no task is signalled: the host goes
    event, = control.events
    assert isinstance(event, FaultInjected)
    assert (event.fault, event.action, event.host, event.tasks, event.signal, event.step,
            event.detail) == ("lose-host:h2:at-step=10", "lose-host", "h2", ("worker:1",), "", 10,
                              "h2 down until healed")
    assert [str(p.fault) for p in hook.pending] == ["heal:h2:after=30"]
    assert control.said == ["drill: lose-host:h2:at-step=10 injected into h2 at step 10 "
                            "(h2 down until healed)"]


def test_a_heal_is_not_an_attempt_timer_and_is_written_when_the_attempt_next_wakes() -> None:
    loser = Loser()
    hook = injector("lose-host:h2:after=1", "heal:h2:after=2", loser=loser)
    control = Control(first_progress_at=100.0)
    assert hook.on_tick(control, 100.5) == 101.0  # only lose-host's after= is the attempt's
    hook.on_tick(control, 101.0)
    assert loser.lost == ["h2"]
    assert hook.on_tick(control, 200.0) == math.inf  # heal:h2's after=2 is not due "at 102"
    assert len(control.events) == 1
    control.attempt = 1  # the host came back while the coordinator was between attempts
    loser.done.append(Healed("h2", 103.25, "h2 up"))
    hook.on_tick(control, 204.0)
    heal = control.events[-1]
    assert isinstance(heal, FaultInjected)
    assert (heal.fault, heal.action, heal.host, heal.attempt, heal.sent_at, heal.detail) == (
        "heal:h2:after=2", "heal", "h2", 1, 103.25, "h2 up")
    assert hook.pending == [] and hook.unreported() == []
    assert control.said[-1] == "drill: heal:h2:after=2: h2 is back (h2 up)"


def test_a_heal_after_the_last_wake_is_handed_to_the_drill() -> None:
    loser = Loser()
    hook, control = injector("lose-host:h2", "heal:h2:after=5", loser=loser), Control()
    hook.on_tick(control, 100.0)
    loser.done.append(Healed("h2", 107.0, "h2 up"))  # then the job ended
    heal, = hook.unreported()
    assert (heal.fault, heal.sent_at, heal.attempt) == ("heal:h2:after=5", 107.0, 0)
    assert hook.pending == []


def test_a_heal_that_failed_is_never_injected() -> None:
    loser = Loser()
    hook, control = injector("lose-host:h2", "heal:h2:after=5", loser=loser), Control()
    hook.on_tick(control, 100.0)
    loser.done.append(Healed("h2", 105.0, "ip: permission denied", ok=False))
    hook.on_tick(control, 106.0)
    assert [e.record()["action"] for e in control.events] == ["lose-host"]
    assert control.said[-1] == "drill: heal:h2:after=5 could not be injected: ip: permission " \
                               "denied"
    assert [str(p.fault) for p in hook.pending] == ["heal:h2:after=5"]


def test_a_host_that_cannot_be_lost_now_is_tried_again() -> None:
    loser = Loser(broken=True)
    hook, control = injector("lose-host:h2:after=0", loser=loser), Control()
    assert hook.on_tick(control, 100.0) == pytest.approx(100.2)
    assert control.events == []
    loser.broken = False
    hook.on_tick(control, 100.2)
    assert loser.lost == ["h2"]


def test_without_a_host_loser_lose_host_never_fires() -> None:
    hook = FaultInjector(resolve(parse_faults(["lose-host:h2"], "f", "t"), TASKS, 0))
    control = Control()
    hook.on_tick(control, 100.0)
    assert control.events == [] and len(hook.pending) == 1
