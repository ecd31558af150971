"""Issue 7, ``tfcluster plan``: no secret is shown (env values by name, credentials in URLs in any
variable or argv word), no value can break a line, and the plan itself keeps the real values."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from launcher.plan.planner import LaunchPlan
from launcher.plan.view import plan_json, plan_text
from launcher.spec.loading import spec_from_dict
from tests.support.planning import named_planner
from worker.wire import env

SECRET_ENV = {
    "DATABASE_URL": "postgres://user:pw-db-1a2b@host/db",
    "GITHUB_PAT": "pat-value-3c4d",
    "MY_KEY": "key-value-5e6f",
    "SSH_PASSPHRASE": "phrase-value-7a8b",
}
SECRET_ARGS = ["--db=postgres://u:pw-arg-9c0d@h/d", "--password", "pw-arg-1e2f", "--api-key=k-3a4b"]


def launch_plan(**fields: Any) -> LaunchPlan:
    spec = spec_from_dict({"name": "s", "entrypoint": {"command": ["train"], "args": SECRET_ARGS},
                           "env": {**SECRET_ENV, "LOG_LEVEL": "visible-value"},
                           "tasks": [{"type": "chief"}, {"type": "worker"}], **fields})
    planner = named_planner(spec, run_dir="/r")
    return planner.plan(0, dict(zip(planner.ports_to_allocate, (21000, 21001), strict=True)))


SECRETS = ["pw-db-1a2b", "pat-value-3c4d", "key-value-5e6f", "phrase-value-7a8b", "pw-arg-9c0d",
           "pw-arg-1e2f", "k-3a4b"]


@pytest.mark.parametrize("render", [plan_text, plan_json], ids=["text", "json"])
def test_plan_shows_no_secret(render: Callable[[LaunchPlan], str]) -> None:
    the_plan = launch_plan()
    out = render(the_plan)
    for secret in SECRETS:
        assert secret not in out
    assert "visible-value" in out
    assert "postgres://user:***@host/db" in out and "postgres://u:***@h/d" in out
    for name in SECRET_ENV:
        assert name in out
    # only what is shown is masked
    assert the_plan.tasks[0].env["MY_KEY"] == "key-value-5e6f"
    assert "pw-arg-1e2f" in the_plan.tasks[0].argv


def test_plan_json_masks_argv_and_keeps_tf_config() -> None:
    data = json.loads(plan_json(launch_plan()))
    for task in data["tasks"]:
        assert task["argv"] == ["train", "--db=postgres://u:***@h/d", "--password", "***",
                                "--api-key=***"]
        assert task["env"]["GITHUB_PAT"] == "***"
        assert json.loads(task["env"][env.TF_CONFIG]) == task["tf_config"]


def test_plan_text_escapes_control_characters() -> None:
    the_plan = launch_plan(env={"BANNER": "line one\nFAKE=shown\x1b[31m\u202e"})
    out = plan_text(the_plan)
    assert "    BANNER=line one\\nFAKE=shown\\x1b[31m\\u202e" in out
    assert "\nFAKE=" not in out and "\x1b" not in out
