"""Fuzzing what tfcluster reads back from places others can write (issue 25): ``events.jsonl``
(``status``, ``--resume``), ``summary.json`` (``status``), ``spec.json`` (``--resume``), an
agent's process table and a task's report lines. Random bytes, the valid file cut at every
length, and every field replaced by values of the wrong type: the reader answers, or refuses in
its own one-line error, never with a traceback, and never hangs. Seeded: a failure replays."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.errors import TfclusterError
from launcher.job.resume import attempts_from_events, checked, open_resume
from launcher.output.run_status import status_lines
from launcher.run.directory import RunDirError
from launcher.run.event_lines import EventLineError, EventLines
from tests.support.run_dirs import lost_run
from worker.wire.process_identity import boot_id
from worker.wire.process_table import ProcessTableError, Recorded, read_table
from worker.wire.reports import BadReport, FailureReport, OtherReport, StepReport, parse_report

pytestmark = pytest.mark.timeout(60)

SEED = 25
#: JSON values of every kind, put where a field was (``NaN`` and ``Infinity``: what Python's json
#: writes and reads although they are not JSON).
CONFUSERS = ("null", '"abc"', '""', "1e300", "-1", "0", "true", "[]", "{}", "[1]", '{"a": 1}',
             "1180591620717411303424", "1.5", "NaN", "-Infinity", '"\\u001b[2J\\n"')
_MARK = "__confused__"


def random_bytes(rng: random.Random, valid: bytes) -> Iterator[bytes]:
    """Noise, and the valid file with bytes flipped, NULs in it, and lines shuffled."""
    for size in (0, 1, 7, 100, 4096):
        yield bytes(rng.getrandbits(8) for _ in range(size))
    for _ in range(12):
        flipped = bytearray(valid)
        for _ in range(rng.randint(1, 8)):
            flipped[rng.randrange(len(flipped))] = rng.getrandbits(8)
        yield bytes(flipped)
    yield valid[: len(valid) // 2] + b"\0" * 300 + valid[len(valid) // 2:]
    lines = valid.splitlines(keepends=True)
    rng.shuffle(lines)
    yield b"".join(lines)


def confused(record: Any, rng: random.Random, per_field: int) -> Iterator[str]:
    """``record`` (a JSON object) as text with one field, top-level or nested one deep, replaced
    by a value of another kind, ``per_field`` at random for each field."""
    paths: list[tuple[str, ...]] = [(key,) for key in record]
    paths += [(key, inner) for key, value in record.items() if isinstance(value, dict)
              for inner in value]
    for path in paths:
        for snippet in rng.sample(CONFUSERS, per_field):
            copy = json.loads(json.dumps(record))
            target = copy
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = _MARK
            yield json.dumps(copy).replace(json.dumps(_MARK), snippet)
        copy = json.loads(json.dumps(record))
        target = copy
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]  # and the field missing
        yield json.dumps(copy)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("fuzz")
    lost_run(base / "run", base / "ckpt")
    return base / "run"


def said(exc: Exception) -> None:
    """A refusal is the reader's own error, in words."""
    text = str(exc).strip()
    if not text:
        raise AssertionError(f"{type(exc).__name__} without a message")


def answers(run_dir: Path) -> None:
    """``status`` answers and ``--resume``'s reading of the events answers or refuses in one
    line; neither raises anything else."""
    shown = status_lines(run_dir, now=1000.0)
    assert shown and all("\n" not in line for line in shown)
    try:
        attempts_from_events(checked(EventLines(run_dir / "events.jsonl")), True)
    except EventLineError as exc:
        said(exc)


def test_events_of_random_bytes(run_dir: Path) -> None:
    valid = (run_dir / "events.jsonl").read_bytes()
    try:
        for data in random_bytes(random.Random(SEED), valid):
            (run_dir / "events.jsonl").write_bytes(data)
            answers(run_dir)
    finally:
        (run_dir / "events.jsonl").write_bytes(valid)


def test_events_cut_at_every_length(run_dir: Path) -> None:
    valid = (run_dir / "events.jsonl").read_bytes()
    try:
        for length in range(len(valid) + 1):
            (run_dir / "events.jsonl").write_bytes(valid[:length])
            if length % 5 == 0 or length == len(valid):  # status reads all; cheaper checks each
                answers(run_dir)
            else:
                attempts_from_events(checked(EventLines(run_dir / "events.jsonl")), True)
    finally:
        (run_dir / "events.jsonl").write_bytes(valid)


def test_events_with_every_field_confused(run_dir: Path) -> None:
    valid = (run_dir / "events.jsonl").read_text()
    lines = valid.splitlines()
    rng = random.Random(SEED)
    refused = 0
    try:
        for number, line in enumerate(lines):
            for variant in confused(json.loads(line), rng, per_field=2):
                text = "\n".join([*lines[:number], variant, *lines[number + 1:]]) + "\n"
                (run_dir / "events.jsonl").write_text(text)
                answers(run_dir)
                try:
                    open_resume(run_dir) if rng.random() < 0.03 else None
                except RunDirError as exc:
                    refused += 1
                    said(exc)
    finally:
        (run_dir / "events.jsonl").write_text(valid)
    assert refused  # some confusions are refused, in one line


SUMMARY = {
    "job": "hostile", "status": "failed", "exit_code": 3, "reason": "r", "restarts": 1,
    "attempts": [{"attempt": 0, "max_step": 25, "steps_lost": 5, "recovery_s": 1.5},
                 {"attempt": 1, "max_step": 28, "steps_lost": None, "recovery_s": None}],
    "health": {"slowest": "worker:1", "tasks": {"worker:0": {
        "steps_per_s": 4.5, "cpu_percent_mean": 88.0, "peak_rss_bytes": 310 * 2**20, "step": 28}}},
    "metrics": {"reports": 120, "file": "metrics.jsonl", "dropped": {"queue_full": 1}},
    "events": {"file": "events.jsonl", "bytes": 10, "max_bytes": 2**27,
               "dropped": {"task_progress": 3}},
}


def test_summary_fuzzed(run_dir: Path) -> None:
    path = run_dir / "summary.json"
    valid = json.dumps(SUMMARY).encode()
    rng = random.Random(SEED)
    cases = [*random_bytes(rng, valid), *(valid[:n] for n in range(0, len(valid) + 1, 3)),
             *(text.encode() for text in confused(SUMMARY, rng, per_field=3))]
    for field in ("attempts", "health"):  # and inside the lists and maps the summary holds
        inner = SUMMARY[field][0] if isinstance(SUMMARY[field], list) else \
            SUMMARY[field]["tasks"]["worker:0"]  # type: ignore[index]
        for text in confused(inner, rng, per_field=3):
            changed = json.loads(valid)
            if field == "attempts":
                changed["attempts"][0] = json.loads(text.replace("NaN", "null")
                                                    .replace("-Infinity", "null"))
            else:
                changed["health"]["tasks"]["worker:0"] = json.loads(
                    text.replace("NaN", "null").replace("-Infinity", "null"))
            cases.append(json.dumps(changed).encode())
    try:
        for data in cases:
            path.write_bytes(data)
            shown = status_lines(run_dir, now=1000.0)
            assert all("\n" not in line for line in shown)
    finally:
        path.unlink()


def test_spec_json_fuzzed(run_dir: Path) -> None:
    path = run_dir / "spec.json"
    valid = path.read_bytes()
    record = json.loads(valid)
    rng = random.Random(SEED)
    cases = [*random_bytes(rng, valid), *(valid[:n] for n in range(0, len(valid) + 1, 2)),
             *(text.encode() for text in confused(record, rng, per_field=3)),
             *(json.dumps({**record, "spec": json.loads(text)}).encode()
               for text in confused(record["spec"], rng, per_field=2)
               if "NaN" not in text and "Infinity" not in text)]
    try:
        for data in cases:
            path.write_bytes(data)
            try:
                open_resume(run_dir)
            except TfclusterError as exc:  # RunDirError, SpecError: one error of tfcluster's own
                said(exc)
    finally:
        path.write_bytes(valid)


def _table(processes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"version": 1, "boot_id": boot_id(), "processes": processes}


def test_process_tables_fuzzed(tmp_path: Path) -> None:
    path = tmp_path / "host.processes.json"
    table = _table([{"pid": 4242, "start_ticks": 123456, "sid": 4242}])
    valid = json.dumps(table).encode()
    rng = random.Random(SEED)
    cases = [*random_bytes(rng, valid), *(valid[:n] for n in range(len(valid) + 1)),
             *(text.encode() for text in confused(table, rng, per_field=4)),
             *(json.dumps(_table([json.loads(text)])).encode()
               for text in confused(table["processes"][0], rng, per_field=5)
               if "NaN" not in text and "Infinity" not in text),
             b'{"version": 1, "boot_id": "x", "processes": [{"pid": Infinity}]}',
             b"[" * 100_000]
    for data in cases:
        path.write_bytes(data)
        try:
            records = read_table(path)
        except ProcessTableError as exc:
            said(exc)
            continue
        assert all(isinstance(r, Recorded) and all(isinstance(v, int) for v in
                                                   (r.pid, r.start_ticks, r.sid))
                   for r in records)


def test_report_lines_fuzzed() -> None:
    valid = json.dumps({"kind": "progress", "step": 7, "metrics": {"loss": 0.5}}).encode()
    error = {"kind": "error", "traceback": "Traceback..."}
    other = {"kind": "exported", "path": "/m", "format": "h5"}
    rng = random.Random(SEED)
    cases = [*random_bytes(rng, valid), *(valid[:n] for n in range(len(valid) + 1)),
             *(text.encode() for record in (json.loads(valid), error, other)
               for text in confused(record, rng, per_field=6)),
             b"[" * 100_000, b'{"kind": "progress", "step": ' + b"9" * 5000 + b"}"]
    kinds: Callable[[object], bool] = lambda r: isinstance(  # noqa: E731
        r, StepReport | FailureReport | OtherReport)
    for raw in cases:
        try:
            assert kinds(parse_report(raw))
        except BadReport as exc:
            said(exc)
