"""``lose-host:NAME[:TRIGGER]`` and ``heal:NAME:after=SECONDS``: parsed and printed back, refused
with field paths when they do not go together, and refused before the drill starts, one line per
host saying why, when a host cannot be lost here (a scripted machine: no root, no namespace, no
Slurm allocation needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from launcher.backends.slurm.node_loss import SlurmNodeError, SlurmNodeLoss
from launcher.drill.faults import (
    Action,
    TargetKind,
    TriggerKind,
    check_targets,
    parse_fault,
    parse_faults,
)
from launcher.drill.host_loss import HostLossError, Machine, NamespaceHostLoss, locate_losses
from launcher.drill.partition import NamespaceLink
from launcher.spec.errors import SpecError
from launcher.spec.loading import spec_from_dict
from launcher.spec.model import ClusterSpec

# --- the grammar ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("lose-host:h2", (Action.LOSE_HOST, "h2", TriggerKind.AFTER, 0, "lose-host:h2:after=0")),
    ("lose-host:h2:after=5", (Action.LOSE_HOST, "h2", TriggerKind.AFTER, 5,
     "lose-host:h2:after=5")),
    ("lose-host:node-7:at-step=30", (Action.LOSE_HOST, "node-7", TriggerKind.AT_STEP, 30,
     "lose-host:node-7:at-step=30")),
    ("lose-host:h2:random", (Action.LOSE_HOST, "h2", TriggerKind.RANDOM, 0,
     "lose-host:h2:random")),
    ("lose-host:host:h2:at-step=3", (Action.LOSE_HOST, "h2", TriggerKind.AT_STEP, 3,
     "lose-host:h2:at-step=3")),  # partition's spelling of a host is accepted too
    ("heal:h2:after=30", (Action.HEAL, "h2", TriggerKind.AFTER, 30, "heal:h2:after=30")),
    ("heal:host:h2:after=0.5", (Action.HEAL, "h2", TriggerKind.AFTER, 0.5, "heal:h2:after=0.5")),
])
def test_host_loss_faults_parse_and_print_back(
        text: str, expected: tuple[Action, str, TriggerKind, float, str]) -> None:
    action, host, trigger, value, shown = expected
    fault = parse_fault(text)
    assert (fault.action, fault.target.kind, fault.target.name) == (action, TargetKind.HOST, host)
    assert (fault.trigger.kind, fault.trigger.value) == (trigger, value)
    assert str(fault) == shown
    assert parse_fault(str(fault)) == fault


@pytest.mark.parametrize(("text", "line"), [
    ("heal:h2", "--fault[0].trigger: heal needs after=SECONDS: how long after lose-host:NAME took "
     "effect the host comes back (e.g. heal:NAME:after=30) (in 'heal:h2')"),
    ("heal:h2:at-step=4", "--fault[0].trigger: heal needs after=SECONDS: how long after "
     "lose-host:NAME took effect the host comes back (e.g. heal:NAME:after=30) "
     "(in 'heal:h2:at-step=4')"),
    ("heal:h2:after=-1", "--fault[0].trigger: after needs seconds between 0 and 604800, not '-1' "
     "(in 'heal:h2:after=-1')"),
    ("lose-host", "--fault[0].target: lose-host needs a host name: write "
     "lose-host:NAME[:TRIGGER], not '' (in 'lose-host')"),
    ("lose-host:after=5", "--fault[0].target: lose-host needs a host name: write "
     "lose-host:NAME[:TRIGGER], not '' (in 'lose-host:after=5')"),
    ("lose-host:h 2:after=5", "--fault[0].target: lose-host needs a host name: write "
     "lose-host:NAME[:TRIGGER], not 'h 2' (in 'lose-host:h 2:after=5')"),
    ("heal:after=5", "--fault[0].target: heal needs a host name: write heal:NAME:after=SECONDS, "
     "not '' (in 'heal:after=5')"),
    ("lose-host:h2:when=3", "--fault[0].trigger: unknown trigger 'when=3' (one of at-step=N, "
     "after=SECONDS, random) (in 'lose-host:h2:when=3')"),
])
def test_bad_host_loss_faults_get_one_line_with_the_field_path(text: str, line: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_faults([text], "--fault", "tfcluster drill")
    assert str(caught.value) == f"tfcluster drill: {line}"


def test_host_loss_faults_hurt_no_task_by_signal() -> None:
    assert Action.LOSE_HOST.signal is None and Action.HEAL.signal is None


# --- faults that do not go together --------------------------------------------------------------


def problems(*texts: str) -> list[str]:
    faults = parse_faults(texts, "f", "t")
    return [str(p) for p in check_targets(faults, ["chief:0", "worker:0"], ["localhost"], "f")]


def test_a_lost_host_and_its_heal_go_together() -> None:
    assert problems("lose-host:h2:at-step=30", "heal:h2:after=20") == []
    assert problems("heal:h2:after=20", "lose-host:h2") == []  # in any order


def test_lose_host_names_a_host_the_spec_need_not_list_yet() -> None:
    """A pool host or a Slurm node is looked up when the drill starts (locate_losses), not here;
    other host targets still must be the spec's."""
    assert problems("lose-host:node9") == []
    assert problems("kill:host:node9") == [
        "f[0].target: no host 'node9' in the spec (hosts: localhost)"]


@pytest.mark.parametrize(("texts", "expected"), [
    (["heal:h2:after=20"], ["f[0].target: heal:h2 gives back a host that lose-host:h2 took away, "
                            "and no fault here is lose-host:h2"]),
    (["lose-host:h3", "heal:h2:after=1"], ["f[1].target: heal:h2 gives back a host that "
                                           "lose-host:h2 took away, and no fault here is "
                                           "lose-host:h2"]),
    (["lose-host:h2", "lose-host:h2:after=9"], ["f[1].target: lose-host:h2 is given twice: a "
                                                "host is lost (and healed) once per scenario"]),
    (["lose-host:h2", "heal:h2:after=1", "heal:h2:after=2"], [
        "f[2].target: heal:h2 is given twice: a host is lost (and healed) once per scenario"]),
    (["lose-host:h2", "kill-coordinator:after=5"], [
        "f[0].action: lose-host cannot go with kill-coordinator: the coordinator the drill kills "
        "would take the lost host's restoration with it"]),
    (["partition:host:localhost", "lose-host:localhost:after=3"], [
        "f[1].action: lose-host:localhost cannot go with partition:host:localhost, whose own "
        "heal would bring the lost host back: give one or the other"]),
])
def test_faults_that_do_not_go_together(texts: list[str], expected: list[str]) -> None:
    assert problems(*texts) == expected


def test_positions_as_written_are_kept() -> None:
    faults = parse_faults(["heal:h2:after=1"], "f", "t")
    found = check_targets(faults, [], [], "scenarios[0].faults", positions=[3])
    assert [p.path for p in found] == ["scenarios[0].faults[3].target"]


# --- refused before the drill starts -------------------------------------------------------------


def netns_spec() -> ClusterSpec:
    return spec_from_dict({
        "name": "pool", "entrypoint": {"script": "train.py"},
        "hosts": {"h1": {"address": "198.18.0.11"}, "h2": {"address": "198.18.0.12"},
                  "h3": {"address": "198.18.0.13"}},
        "tasks": [{"type": "chief", "host": "h1", "port": 2222},
                  {"type": "worker", "host": "h2", "port": 2222}]})


def slurm_spec() -> ClusterSpec:
    return spec_from_dict({"name": "digits", "entrypoint": {"module": "m"},
                           "tasks": [{"type": "chief"}, {"type": "worker", "count": 2}],
                           "slurm": {}, "checkpoint": {"dir": "/shared/ckpt"}})


LINKS = {"198.18.0.12": NamespaceLink("tfc1-h2", "eth0"),
         "198.18.0.13": NamespaceLink("tfc1-h3", "eth0")}


class FakeSlurm:
    """Slurm's client commands, scripted: the allocation's nodes and each node's state."""

    def __init__(self, states: Mapping[str, str]) -> None:
        self.states = dict(states)
        self.ran: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        self.ran.append(list(argv))
        if list(argv[:3]) == ["scontrol", "show", "hostnames"]:
            return "\n".join(self.states) + "\n"
        if list(argv[:4]) == ["scontrol", "show", "node", "-o"]:
            node = argv[4]
            return f"NodeName={node} Arch=x86_64 NodeAddr={node} State={self.states[node]} " \
                   "Partitions=debug\n"
        raise SlurmNodeError(f"unexpected {' '.join(argv)}")


def machine(*, root: bool = True, ip: bool = True, environ: Mapping[str, str] | None = None,
            slurm: FakeSlurm | None = None) -> Machine:
    return Machine(euid=lambda: 0 if root else 1000, has_ip=lambda: ip,
                   find_link=LINKS.get, environ=environ or {},
                   run=slurm or FakeSlurm({}))


def lose(*texts: str) -> list[Any]:
    return parse_faults(texts, "f", "t")


ALLOCATION = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "n[1-3]"}


def test_a_namespace_host_is_found_and_nothing_is_changed() -> None:
    found = locate_losses(netns_spec(), lose("lose-host:h2:after=3", "heal:h2:after=9",
                                             "kill:worker:0"), machine())
    assert found == {"h2": NamespaceHostLoss(NamespaceLink("tfc1-h2", "eth0"))}


def test_a_drill_without_lost_hosts_asks_nothing() -> None:
    assert locate_losses(netns_spec(), lose("kill:chief"), machine(root=False, ip=False)) == {}


def test_a_slurm_node_of_the_allocation_is_found() -> None:
    slurm = FakeSlurm({"n1": "MIXED", "n2": "ALLOCATED", "n3": "IDLE"})
    found = locate_losses(slurm_spec(), lose("lose-host:n2:at-step=5"),
                          machine(environ=ALLOCATION, slurm=slurm))
    assert found == {"n2": SlurmNodeLoss("n2", "4242", "tfcluster-digits", slurm)}
    assert slurm.ran == [["scontrol", "show", "hostnames", "n[1-3]"],
                         ["scontrol", "show", "node", "-o", "n2"]]  # looked at, not changed


@pytest.mark.parametrize(("spec", "texts", "where", "lines"), [
    (netns_spec, ["lose-host:h2", "lose-host:h3"], machine(root=False), [
        "lose-host:h2: needs root (to take a host's link down or drain a Slurm node)",
        "lose-host:h3: needs root (to take a host's link down or drain a Slurm node)"]),
    (netns_spec, ["lose-host:h9"], machine(), [
        "lose-host:h9: no host 'h9' under the spec's hosts (hosts: h1, h2, h3)"]),
    (netns_spec, ["lose-host:h1", "lose-host:h2", "lose-host:h9"], machine(), [  # all at once
        "lose-host:h1: no network namespace here holds 198.18.0.11; lose-host works on "
        "network-namespace hosts (e.g. tests/netns) and on the nodes of the Slurm allocation a "
        "Slurm spec runs on",
        "lose-host:h9: no host 'h9' under the spec's hosts (hosts: h1, h2, h3)"]),
    (netns_spec, ["lose-host:h2"], machine(ip=False), [
        "lose-host:h2: needs iproute2 ('ip') on this machine"]),
    (slurm_spec, ["lose-host:n2"], machine(), [
        "lose-host:n2: the spec runs on a Slurm allocation, but SLURM_JOB_ID is not set: run the "
        "drill inside the allocation (salloc, or an sbatch script)"]),
    (slurm_spec, ["lose-host:n7", "lose-host:n3"],
     machine(environ=ALLOCATION, slurm=FakeSlurm({"n1": "IDLE", "n2": "IDLE",
                                                  "n3": "IDLE+DRAIN"})), [
        "lose-host:n7: not a node of Slurm job 4242 (nodes: n1, n2, n3)",
        "lose-host:n3: Slurm node n3 is drained already (State=IDLE+DRAIN): the drill would "
        "resume it at the end"]),
])
def test_hosts_that_cannot_be_lost_are_refused_one_line_each(
        spec: Any, texts: list[str], where: Machine, lines: list[str]) -> None:
    with pytest.raises(HostLossError) as caught:
        locate_losses(spec(), lose(*texts), where)
    assert str(caught.value).splitlines() == lines
