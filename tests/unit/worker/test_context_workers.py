"""What ``worker.context()`` says about the job's size: ``num_workers`` (this attempt, TF_CONFIG's
count), ``max_workers`` (what the spec asks for) and ``resized``, from the elastic variables."""

from __future__ import annotations

import json

import pytest

from worker.task_context import WorkerCountError, context
from worker.wire import env

CHIEF_AND_1 = {"chief": ["h0:1000"], "worker": ["h1:1001"]}  # 2 training tasks


def environ(variables: dict[str, str], kind: str = "worker", index: int = 0) -> dict[str, str]:
    tf_config = {"cluster": CHIEF_AND_1, "task": {"type": kind, "index": index}}
    return {env.TF_CONFIG: json.dumps(tf_config), env.TASK: f"{kind}:{index}", **variables}


@pytest.mark.parametrize(
    ("variables", "num", "most", "resized"),
    [
        pytest.param({}, 2, 2, False, id="not-elastic"),
        pytest.param({env.NUM_WORKERS: "2", env.MAX_WORKERS: "2"}, 2, 2, False, id="full-size"),
        pytest.param({env.NUM_WORKERS: "2", env.MAX_WORKERS: "4"}, 2, 4, True, id="smaller"),
        pytest.param({env.MAX_WORKERS: "3"}, 2, 3, True, id="max-only"),
        pytest.param({env.NUM_WORKERS: "", env.MAX_WORKERS: ""}, 2, 2, False, id="empty-is-unset"),
    ],
)
def test_counts_come_from_tf_config_and_the_elastic_variables(
        variables: dict[str, str], num: int, most: int, resized: bool) -> None:
    ctx = context(environ(variables))
    assert (ctx.num_workers, ctx.max_workers, ctx.resized) == (num, most, resized)


def test_the_evaluator_counts_the_training_tasks_too() -> None:
    ctx = context(environ({env.NUM_WORKERS: "2", env.MAX_WORKERS: "3"}, "evaluator"))
    assert (ctx.num_workers, ctx.max_workers, ctx.resized) == (2, 3, True)


def test_outside_tfcluster_a_lone_chief_is_its_full_size() -> None:
    ctx = context({})
    assert (ctx.num_workers, ctx.max_workers, ctx.resized) == (1, 1, False)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        pytest.param({env.NUM_WORKERS: "3"},
                     "TFCLUSTER_NUM_WORKERS='3' but TF_CONFIG's cluster has 2 training task(s)",
                     id="num-disagrees"),
        pytest.param({env.MAX_WORKERS: "1"},
                     "TFCLUSTER_MAX_WORKERS='1' is less than this attempt's 2 training task(s)",
                     id="max-below-num"),
        pytest.param({env.MAX_WORKERS: "four"},
                     "TFCLUSTER_MAX_WORKERS='four' is not a count of training tasks "
                     "(an integer >= 1)", id="max-not-a-number"),
        pytest.param({env.NUM_WORKERS: "0"},
                     "TFCLUSTER_NUM_WORKERS='0' is not a count of training tasks (an integer >= 1)",
                     id="num-zero"),
        pytest.param({env.NUM_WORKERS: "-2"}, "TFCLUSTER_NUM_WORKERS='-2' is not a count",
                     id="num-negative"),
        pytest.param({env.MAX_WORKERS: " 3"}, "TFCLUSTER_MAX_WORKERS=' 3' is not a count",
                     id="max-space"),
        pytest.param({env.MAX_WORKERS: "\u00b3"}, "TFCLUSTER_MAX_WORKERS='\u00b3' is not a count",
                     id="max-superscript"),  # str.isdigit() accepts it, int() does not
    ],
)
def test_contradicting_counts_are_refused_in_one_line_naming_the_variable(
        variables: dict[str, str], message: str) -> None:
    with pytest.raises(WorkerCountError) as raised:
        context(environ(variables))
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)
    name, value = next(iter(variables.items()))
    assert (raised.value.variable, raised.value.value) == (name, value)
