"""Slurm placement without a cluster (pure): the spec's slurm section, tasks on nodes in Slurm's
order, ports, spares and bad nodes, and what tfcluster plan adds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from launcher.backends.slurm.allocation import SlurmNode
from launcher.backends.slurm.placement import NodeLosses, NodesExhausted, TooFewNodes, place
from launcher.plan.placement import PastAttempt, Placement
from launcher.plan.planner import LaunchPlan, Planner
from launcher.spec.errors import SpecError
from launcher.spec.loading import spec_from_dict
from launcher.spec.model import ClusterSpec

NODES = tuple(SlurmNode(f"node{i}", f"10.0.0.{i}") for i in (9, 10, 11, 12))


def spec(**fields: Any) -> ClusterSpec:
    data: dict[str, Any] = {"name": "p", "entrypoint": {"module": "m"},
                            "tasks": [{"type": "chief"}, {"type": "worker", "count": 3}],
                            "slurm": {}, "checkpoint": {"dir": "ckpt"}}
    data.update(fields)
    return spec_from_dict(data)


@dataclass(frozen=True)
class Past:
    """An attempt that ran, as the engine sees it."""

    attempt: int
    lost_hosts: frozenset[str]


class Placed:
    """The job planned on an allocation's nodes, attempt after attempt, with what was lost."""

    def __init__(self, job: ClusterSpec, nodes: Sequence[SlurmNode] = NODES) -> None:
        def on_nodes(placed: ClusterSpec, history: Sequence[PastAttempt]) -> Placement:
            return place(placed, nodes, NodeLosses.of(history, 0), python="/py")

        self.planner = Planner(job, on_nodes, run_dir="/runs/p", base_dir="/shared/work")
        self.history: list[Past] = []

    def plan(self, attempt: int) -> LaunchPlan:
        return self.planner.plan(attempt, history=self.history)


def planner(**fields: Any) -> Placed:
    return Placed(spec(**fields))


def lost(p: Placed, host: str, attempt: int) -> None:
    p.history.append(Past(attempt, frozenset({host})))


def test_tasks_go_to_the_nodes_in_slurm_order_chief_first_with_consecutive_ports() -> None:
    plan = planner(slurm={"tasks_per_node": 2, "port": 30000}).plan(0)
    assert [(h.name, h.address, [str(t.task) for t in h.tasks]) for h in plan.hosts] == [
        ("node9", "10.0.0.9", ["chief:0", "worker:0"]),
        ("node10", "10.0.0.10", ["worker:1", "worker:2"])]
    assert plan.cluster == {"chief": ("10.0.0.9:30000",),
                            "worker": ("10.0.0.9:30001", "10.0.0.10:30002", "10.0.0.10:30003")}
    assert plan.checkpoint_dir == "/shared/work/ckpt"
    assert {t.cwd for t in plan.tasks} == {"/shared/work"}
    assert {h.python for h in plan.hosts} == {"/py"}


def test_a_spare_takes_the_place_of_a_lost_node_then_nodes_run_out() -> None:
    p = planner(tasks=[{"type": "chief"}, {"type": "worker", "count": 2}],
                slurm={"spare_nodes": 1})
    assert [h.name for h in p.plan(0).hosts] == ["node9", "node10", "node11"]
    lost(p, "node10", 0)
    assert [h.name for h in p.plan(1).hosts] == ["node9", "node11", "node12"]
    lost(p, "node9", 1)
    with pytest.raises(NodesExhausted, match="lost agents on node10, node9: requeue the job "
                       r"without them \(sbatch --exclude=node10,node9\)"):
        p.plan(2)


def test_without_spares_a_node_is_kept_until_it_failed_max_node_failures_times() -> None:
    p = planner(slurm={"max_node_failures": 2})
    lost(p, "node10", 0)
    lost(p, "node10", 0)  # one attempt counts once
    assert [h.name for h in p.plan(1).hosts] == [n.name for n in NODES]
    lost(p, "node10", 1)
    with pytest.raises(NodesExhausted):
        p.plan(2)


def test_too_few_nodes_names_what_to_allocate() -> None:
    with pytest.raises(TooFewNodes, match=r"has 2 node\(s\) but the spec needs 4 \+ 1 spare .* "
                       "allocate 5 nodes"):
        Placed(spec(slurm={"spare_nodes": 1}), NODES[:2]).plan(0)


@pytest.mark.parametrize(("fields", "problem"), [
    ({"tasks": [{"type": "chief", "host": "n1"}]},
     "tasks[0].host: must not be set with slurm"),
    ({"tasks": [{"type": "chief", "port": 2000}]}, "tasks[0].port: must not be set with slurm"),
    ({"hosts": {"a": {}}}, "hosts: must be empty with slurm"),
    ({"slurm": {"port": 65534}}, "slurm.port: ports 65534..65537 go past 65535"),
    ({"slurm": {"tasks_per_node": 0}}, "slurm.tasks_per_node"),
    ({"slurm": {"nodes": 3}}, "slurm.nodes"),
])
def test_bad_slurm_specs_name_the_field(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(SpecError) as caught:
        spec(**fields)
    assert problem in str(caught.value)


def test_the_batch_script_quotes_every_path_and_option() -> None:
    from launcher.backends.slurm.sbatch import BatchRequest, batch_script

    script = batch_script(BatchRequest(
        spec="/a b/spec.yaml", run_dir="/runs/it's $HOME", script="/runs/x.sbatch",
        job_name="tfcluster-x", nodes=2, python="/py", workdir="/w d", account="a;b",
        extra=("--qos=high low",)))
    lines = script.splitlines()
    assert "#SBATCH '--chdir=/w d'" in lines
    assert "#SBATCH '--account=a;b'" in lines
    assert "#SBATCH '--qos=high low'" in lines
    assert "run_dir='/runs/it'\"'\"'s $HOME'" in lines
    assert "spec='/a b/spec.yaml'" in lines
