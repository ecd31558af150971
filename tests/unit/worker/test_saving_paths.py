"""Where ``worker.save_model`` writes on each task, and how an export reaches ``summary.json``
(no TensorFlow: the paths and the event are plain data)."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.run.events import ModelExported
from launcher.run.summary import export_summary
from worker.saving import SaveFormat, save_format, write_path
from worker.task_context import TaskContext, context
from worker.wire.tfconfig import TaskId, TFConfig, build_cluster

CLUSTER = build_cluster({TaskId("chief", 0): "localhost:1", TaskId("worker", 0): "localhost:2",
                         TaskId("worker", 1): "localhost:3"})


def ctx_of(task: TaskId) -> TaskContext:
    return context({"TF_CONFIG": TFConfig(cluster=CLUSTER, task=task).to_json()})


def test_only_the_chief_writes_the_path_itself(tmp_path: Path) -> None:
    path = str(tmp_path / "models" / "digits.keras")
    assert write_path(path, ctx_of(TaskId("chief", 0))) == path
    assert write_path(path, ctx_of(TaskId("worker", 1))) == str(
        tmp_path / "models" / "workertemp_worker_1" / "digits.keras")  # same name, own dir
    assert write_path(path, ctx_of(TaskId("worker", 0))) != write_path(
        path, ctx_of(TaskId("worker", 1)))


def test_the_suffix_chooses_the_format() -> None:
    assert [save_format(p) for p in ("m.keras", "m.H5", "m.hdf5", "dir/model", "m.tf")] == [
        SaveFormat.KERAS, SaveFormat.H5, SaveFormat.H5, SaveFormat.SAVED_MODEL,
        SaveFormat.SAVED_MODEL]


def test_the_summary_records_every_export_and_the_last_one(tmp_path: Path) -> None:
    assert export_summary(str(tmp_path)) == {"exports": [], "export": None}  # no events yet
    events = [ModelExported.from_report(0, "chief:0", {"path": "/m/a", "format": "h5"}),
              ModelExported.from_report(1, "chief:0", {"path": "/m/b", "format": "saved_model"})]
    lines = [{"ts": 1.0, "event": "task_started", "task": "chief:0"},
             *({"ts": 2.0, "event": e.TYPE.value, **e.record()} for e in events)]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    summary = export_summary(str(tmp_path))
    assert [e["path"] for e in summary["exports"]] == ["/m/a", "/m/b"]
    assert summary["export"] == {"attempt": 1, "task": "chief:0", "path": "/m/b",
                                 "format": "saved_model"}
