"""TF_CONFIG as both sides read it, and what ``worker.context()`` tells a training script."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from worker.task_context import context
from worker.wire import env
from worker.wire.tfconfig import TaskId, TFConfig, TFConfigError, build_cluster

CHIEF0, WORKER0, WORKER1, EVAL0 = (TaskId("chief", 0), TaskId("worker", 0), TaskId("worker", 1),
                                   TaskId("evaluator", 0))


def tf_config(cluster: dict[str, list[str]], kind: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})


# --- TaskId --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("chief:0", CHIEF0),
        ("worker:1", WORKER1),
        ("worker:12", TaskId("worker", 12)),
        ("evaluator:0", EVAL0),
    ],
)
def test_task_id_parses_and_prints_back(text: str, expected: TaskId) -> None:
    assert TaskId.parse(text) == expected
    assert str(expected) == text
    assert TaskId.parse(str(expected)) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("worker", id="no-colon"),
        pytest.param("worker:", id="no-index"),
        pytest.param(":1", id="no-type"),
        pytest.param("server:0", id="unknown-type"),
        pytest.param("Worker:0", id="wrong-case"),
        pytest.param("worker:-1", id="negative"),
        pytest.param("worker:a", id="letters"),
        pytest.param("worker:1:2", id="two-colons"),
        pytest.param("worker 1", id="space"),
        pytest.param("", id="empty"),
        pytest.param("worker:\u00b2", id="superscript-two"),  # str.isdigit() accepts it, int() does not
    ],
)
def test_task_id_rejects_what_is_not_type_colon_index(text: str) -> None:
    with pytest.raises(TFConfigError, match="not a task id"):
        TaskId.parse(text)


def test_task_id_file_stem_names_per_task_files() -> None:
    assert WORKER1.file_stem == "worker-1"
    assert CHIEF0.file_stem == "chief-0"


# --- TFConfig ------------------------------------------------------------------------------------

CHIEF_AND_2 = {"chief": ["h0:1000"], "worker": ["h1:1001", "h2:1002"]}
WORKERS_ONLY = {"worker": ["h1:1001", "h2:1002", "h3:1003"]}

CONFIG_CASES = [
    # (cluster, task, is_chief, chief, num_workers)
    pytest.param(CHIEF_AND_2, CHIEF0, True, CHIEF0, 3, id="chief-of-chief-cluster"),
    pytest.param(CHIEF_AND_2, WORKER0, False, CHIEF0, 3, id="worker0-with-chief"),
    pytest.param(CHIEF_AND_2, WORKER1, False, CHIEF0, 3, id="worker1-with-chief"),
    pytest.param(CHIEF_AND_2, EVAL0, False, CHIEF0, 3, id="evaluator-with-chief"),
    pytest.param(WORKERS_ONLY, WORKER0, True, WORKER0, 3, id="worker0-is-chief-without-chief"),
    pytest.param(WORKERS_ONLY, TaskId("worker", 2), False, WORKER0, 3, id="worker2-no-chief"),
    pytest.param(WORKERS_ONLY, EVAL0, False, WORKER0, 3, id="evaluator-no-chief"),
    pytest.param({"worker": ["h:1"], "evaluator": ["e:2"]}, WORKER0, True, WORKER0, 1,
                 id="evaluator-in-cluster-not-counted"),
    pytest.param({"chief": [], "worker": ["h:1"]}, WORKER0, True, WORKER0, 1, id="empty-chief-list"),
]


@pytest.mark.parametrize(("cluster", "task", "is_chief", "chief", "num_workers"), CONFIG_CASES)
def test_tf_config_roles(cluster: dict[str, list[str]], task: TaskId, is_chief: bool, chief: TaskId,
                         num_workers: int) -> None:
    config = TFConfig.from_json(tf_config(cluster, task.type, task.index))
    assert config.task == task
    assert config.chief == chief
    assert config.is_chief is is_chief
    assert config.num_workers == num_workers


def test_tf_config_json_round_trip_and_shape() -> None:
    config = TFConfig(cluster={"chief": ("h0:1000",), "worker": ("h1:1001", "h2:1002")}, task=WORKER1)
    raw = json.loads(config.to_json())
    assert raw == {"cluster": {"chief": ["h0:1000"], "worker": ["h1:1001", "h2:1002"]},
                   "task": {"type": "worker", "index": 1}}
    assert config.to_dict() == raw
    again = TFConfig.from_json(config.to_json())
    assert again == config
    assert again.address(WORKER1) == "h2:1002"
    assert again.address(CHIEF0) == "h0:1000"


def test_tf_config_reads_what_tensorflow_users_write() -> None:
    text = '{"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, ' \
           '"task": {"type": "worker", "index": 0}}'
    config = TFConfig.from_json(text)
    assert config.cluster == {"worker": ("localhost:12345", "localhost:23456")}
    assert config.is_chief


BAD_TF_CONFIGS = [
    pytest.param("not json", "not JSON", id="not-json"),
    pytest.param("[1, 2]", "JSON object", id="list"),
    pytest.param('"x"', "JSON object", id="string"),
    pytest.param('{"task": {"type": "worker", "index": 0}}', "'cluster'", id="no-cluster"),
    pytest.param('{"cluster": {"worker": ["h:1"]}}', "'task'", id="no-task"),
    pytest.param('{"cluster": [], "task": {"type": "worker", "index": 0}}', "'cluster'",
                 id="cluster-list"),
    pytest.param(tf_config({"worker": ["h:1"]}, "worker", 0).replace('"index": 0', '"index": "0"'),
                 "integer 'index'", id="index-str"),
    pytest.param('{"cluster": {"worker": ["h:1"]}, "task": {"index": 0}}', "string 'type'",
                 id="no-type"),
    pytest.param(tf_config({"worker": ["h:1", "h:2"]}, "worker", 2), "not in the cluster",
                 id="index-past-end"),
    pytest.param(tf_config({"worker": ["h:1"]}, "chief", 0), "not in the cluster",
                 id="chief-missing"),
    pytest.param(tf_config({"worker": ["h:1", "h:2"]}, "worker", -1), "", id="negative-index"),
    pytest.param(tf_config({"worker": ["h:1", "h:2"]}, "worker", 0).replace('"index": 0', '"index": true'),
                 "", id="index-bool"),
    pytest.param('{"cluster": {"worker": "h:1"}, "task": {"type": "worker", "index": 0}}', "",
                 id="members-not-a-list"),
    pytest.param('{"cluster": {"worker": 5}, "task": {"type": "worker", "index": 0}}', "",
                 id="members-a-number"),
]


@pytest.mark.parametrize(("text", "message"), BAD_TF_CONFIGS)
def test_tf_config_errors_are_tf_config_errors(text: str, message: str) -> None:
    with pytest.raises(TFConfigError) as info:
        TFConfig.from_json(text)
    assert message in str(info.value)


# --- build_cluster -------------------------------------------------------------------------------


def test_build_cluster_orders_by_index_and_leaves_evaluators_out() -> None:
    addresses = {
        WORKER1: "w1:2",
        EVAL0: "e0:9",
        CHIEF0: "c0:0",
        WORKER0: "w0:1",
    }
    cluster = build_cluster(addresses)
    assert cluster == {"chief": ("c0:0",), "worker": ("w0:1", "w1:2")}
    assert list(cluster) == ["chief", "worker"]


def test_build_cluster_without_chief_has_no_chief_key() -> None:
    assert build_cluster({WORKER0: "a:1", WORKER1: "b:2"}) == {"worker": ("a:1", "b:2")}


@pytest.mark.parametrize(
    "addresses",
    [
        pytest.param({TaskId("worker", 1): "a:1"}, id="starts-at-1"),
        pytest.param({WORKER0: "a:1", TaskId("worker", 2): "b:2"}, id="gap"),
        pytest.param({TaskId("chief", 1): "c:1", WORKER0: "a:1"}, id="chief-1"),
    ],
)
def test_build_cluster_checks_indices(addresses: dict[TaskId, str]) -> None:
    with pytest.raises(TFConfigError, match=r"indices must be 0\.\."):
        build_cluster(addresses)


# --- worker.context() ----------------------------------------------------------------------------


def test_context_outside_tfcluster_is_a_lone_chief_at_attempt_0() -> None:
    ctx = context({})
    assert ctx.task == CHIEF0
    assert (ctx.task_type, ctx.task_index) == ("chief", 0)
    assert ctx.is_chief
    assert ctx.num_workers == 1
    assert ctx.attempt == 0
    assert ctx.job == "local"
    assert ctx.checkpoint_dir is None
    assert ctx.chief_checkpoint_dir is None
    assert ctx.resume_checkpoint is None
    assert ctx.resume_step is None
    assert ctx.run_dir is None
    assert not ctx.under_tfcluster


def tfcluster_env(cluster: dict[str, list[str]], task: TaskId, **extra: str) -> dict[str, str]:
    return {
        env.TF_CONFIG: tf_config(cluster, task.type, task.index),
        env.JOB: "digits",
        env.TASK: str(task),
        env.ATTEMPT: "2",
        env.RUN_DIR: "/runs/digits-1",
        env.CHECKPOINT_DIR: "/ckpt/digits",
        **extra,
    }


CONTEXT_CASES = [
    # (cluster, task, is_chief, own checkpoint dir)
    pytest.param(CHIEF_AND_2, CHIEF0, True, "/ckpt/digits", id="chief"),
    pytest.param(CHIEF_AND_2, WORKER0, False, "/ckpt/digits/workertemp_0", id="worker0-with-chief"),
    pytest.param(CHIEF_AND_2, WORKER1, False, "/ckpt/digits/workertemp_1", id="worker1-with-chief"),
    pytest.param(WORKERS_ONLY, WORKER0, True, "/ckpt/digits", id="worker0-is-chief"),
    pytest.param(WORKERS_ONLY, TaskId("worker", 2), False, "/ckpt/digits/workertemp_2", id="worker2"),
]


@pytest.mark.parametrize(("cluster", "task", "is_chief", "own_dir"), CONTEXT_CASES)
def test_context_checkpoint_dirs(cluster: dict[str, list[str]], task: TaskId, is_chief: bool,
                                 own_dir: str) -> None:
    ctx = context(tfcluster_env(cluster, task))
    assert ctx.task == task
    assert ctx.is_chief is is_chief
    assert ctx.checkpoint_dir == own_dir
    assert ctx.chief_checkpoint_dir == "/ckpt/digits"
    assert ctx.num_workers == 3
    assert ctx.attempt == 2
    assert ctx.job == "digits"
    assert ctx.run_dir == "/runs/digits-1"
    assert ctx.under_tfcluster


@pytest.mark.parametrize(
    ("extra", "checkpoint", "step"),
    [
        pytest.param({}, None, None, id="first-attempt"),
        pytest.param({env.RESUME_CHECKPOINT: "/ckpt/digits/ckpt-4", env.RESUME_STEP: "200"},
                     "/ckpt/digits/ckpt-4", 200, id="resume"),
        pytest.param({env.RESUME_CHECKPOINT: "", env.RESUME_STEP: ""}, None, None, id="empty"),
    ],
)
def test_context_resume_point(extra: dict[str, str], checkpoint: str | None, step: int | None) -> None:
    ctx = context(tfcluster_env(WORKERS_ONLY, WORKER1, **extra))
    assert ctx.resume_checkpoint == checkpoint
    assert ctx.resume_step == step


def test_context_without_checkpoint_dir_has_none_for_every_task() -> None:
    environ = tfcluster_env(CHIEF_AND_2, WORKER1)
    del environ[env.CHECKPOINT_DIR]
    ctx = context(environ)
    assert ctx.checkpoint_dir is None
    assert ctx.chief_checkpoint_dir is None


def test_context_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    values: dict[str, Any] = tfcluster_env(WORKERS_ONLY, WORKER1)
    for name in list(os.environ):
        if name.startswith("TFCLUSTER_") or name == env.TF_CONFIG:
            monkeypatch.delenv(name)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    ctx = context()
    assert ctx.task == WORKER1
    assert ctx.checkpoint_dir == os.path.join("/ckpt/digits", "workertemp_1")
