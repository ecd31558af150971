"""Slurm placement without a cluster (pure): the spec's slurm section, tasks on nodes in Slurm's
order, ports, spares and bad nodes, and what tfcluster plan adds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from launcher.backends.slurm.allocation import SlurmNode
from launcher.backends.slurm.placement import TooFewNodes, node_pool
from launcher.plan.planner import LaunchPlan, Planner
from launcher.plan.pool import HostPool, TooFewHosts
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


class Placed:
    """The job planned on an allocation's nodes, attempt after attempt, with what was lost."""

    def __init__(self, job: ClusterSpec, nodes: Sequence[SlurmNode] = NODES) -> None:
        self.pool = HostPool(job, node_pool(job, nodes, python="/py"))
        self.planner = Planner(job, self.pool.place, run_dir="/runs/p", base_dir="/shared/work",
                               pool=self.pool)

    def plan(self, attempt: int) -> LaunchPlan:
        return self.planner.plan(attempt)


def planner(**fields: Any) -> Placed:
    return Placed(spec(**fields))


def lost(p: Placed, host: str, attempt: int) -> None:
    ran = {h.name for h in p.pool.place().hosts}
    p.pool.after_attempt(lost={host}, failed=set(), ran=ran, now=float(attempt))


def test_tasks_go_to_the_nodes_in_slurm_order_chief_first_with_consecutive_ports() -> None:
    plan = planner(placement={"tasks_per_host": 2, "port": 30000}).plan(0)
    assert [(h.name, h.address, [str(t.task) for t in h.tasks]) for h in plan.hosts] == [
        ("node9", "10.0.0.9", ["chief:0", "worker:0"]),
        ("node10", "10.0.0.10", ["worker:1", "worker:2"])]
    assert plan.cluster == {"chief": ("10.0.0.9:30000",),
                            "worker": ("10.0.0.9:30001", "10.0.0.10:30002", "10.0.0.10:30003")}
    assert plan.checkpoint_dir == "/shared/work/ckpt"
    assert {t.cwd for t in plan.tasks} == {"/shared/work"}
    assert {h.python for h in plan.hosts} == {"/py"}


def test_the_old_slurm_fields_still_place_the_same_way_and_say_what_replaces_them() -> None:
    from launcher.spec.placement import renamed_fields

    old = spec(slurm={"tasks_per_node": 2, "port": 30000, "spare_nodes": 1})
    assert Placed(old).plan(0).cluster == planner(
        placement={"tasks_per_host": 2, "port": 30000}).plan(0).cluster
    assert renamed_fields(old.slurm) == [
        "slurm.tasks_per_node is now placement.tasks_per_host (slurm.tasks_per_node still works)",
        "slurm.spare_nodes is now placement.spares (slurm.spare_nodes still works)",
        "slurm.port is now placement.port (slurm.port still works)"]


def test_a_spare_takes_the_place_of_a_lost_node_then_nodes_run_out() -> None:
    p = planner(tasks=[{"type": "chief"}, {"type": "worker", "count": 2}])
    assert [h.name for h in p.plan(0).hosts] == ["node9", "node10", "node11"]
    lost(p, "node10", 0)
    assert [h.name for h in p.plan(1).hosts] == ["node9", "node11", "node12"]
    assert [str(t.task) for t in p.plan(1).tasks] == ["chief:0", "worker:0", "worker:1"]
    lost(p, "node9", 1)
    with pytest.raises(TooFewHosts, match=r"too few usable hosts: 2 of the 3 the job needs at "
                       r"its smallest \(node9: its agent was lost; node10: its agent was lost\)"):
        p.plan(2)


def test_with_min_workers_a_lost_node_without_spare_shrinks_the_job() -> None:
    p = planner(placement={"min_workers": 2})
    lost(p, "node10", 0)
    plan = p.plan(1)
    assert [str(t.task) for t in plan.tasks] == ["chief:0", "worker:0", "worker:1"]
    assert [h.name for h in plan.hosts] == ["node9", "node11", "node12"]
    assert plan.tasks[0].env["TFCLUSTER_NUM_WORKERS"] == "3"
    assert plan.tasks[0].env["TFCLUSTER_MAX_WORKERS"] == "4"


def test_too_few_nodes_names_what_to_allocate() -> None:
    with pytest.raises(TooFewNodes, match=r"has 2 node\(s\) but the spec needs 4 \+ 1 spare .* "
                       "allocate 5 nodes"):
        Placed(spec(placement={"spares": 1}), NODES[:2]).plan(0)


@pytest.mark.parametrize(("fields", "problem"), [
    ({"tasks": [{"type": "chief", "host": "n1"}]},
     "tasks[0].host: must not be set with slurm"),
    ({"tasks": [{"type": "chief", "port": 2000}]}, "tasks[0].port: must not be set with slurm"),
    ({"hosts": {"a": {}}}, "hosts: must be empty with slurm"),
    ({"slurm": {"port": 65534}}, "slurm.port: ports 65534..65537 go past 65535"),
    ({"slurm": {"tasks_per_node": 0}}, "slurm.tasks_per_node"),
    ({"placement": {"hosts": ["a"]}}, "placement.hosts: must be omitted with slurm"),
    ({"placement": {"port": 30000}, "slurm": {"port": 30000}}, "slurm: give these fields under "
     "placement only: slurm.port -> placement.port"),
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
