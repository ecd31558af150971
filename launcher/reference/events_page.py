"""The events reference: every event type a run writes to ``events.jsonl``, with its fields, from
the event classes themselves (:class:`launcher.run.events.Event` and its subclasses in the run
package and the engines)."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import pkgutil
import typing
from collections.abc import Iterator
from typing import Any

from launcher.reference.markdown import GENERATED, class_comments, code, docstring, table, text

#: The modules that define tfcluster's own events; each engine's are found by importing the
#: engine (every package of launcher.backends), whose classes register themselves.
EVENT_MODULES = ("launcher.run.events", "launcher.run.pool_events", "launcher.run.task_events")

#: What the events whose class has no docstring record.
SUMMARIES = {
    "job_started": "The job starts: its name, run directory, tasks and hosts.",
    "attempt_started": "An attempt starts, and from which checkpoint (none on the first).",
    "task_started": "A task's process started (or was handed to a warm spare).",
    "task_progress": "A task reported a step (`worker.report`); its metrics go to metrics.jsonl. "
                     "`first`: the attempt's first report of that task.",
    "task_preempted": "A task reported a preemption notice (SIGTERM) and the step it saves at.",
    "task_failed": "A task failed: how (exit code or signal, its traceback or last stderr "
                   "lines), its kind, and how long tfcluster took to see it.",
    "job_stopping": "tfcluster stops the attempt's tasks, and why.",
    "checkpoint_found": "The checkpoint the next attempt resumes from, and those skipped as "
                        "incomplete or unrestorable.",
    "job_restarting": "The job restarts: why, after what backoff, whether it counts against "
                      "`restart.max_restarts`, and from which checkpoint.",
    "job_succeeded": "The job ended well.",
    "job_failed": "The job failed: why, `tfcluster`'s exit code and the root cause.",
    "task_memory_high": "A task's RSS passed `health.memory_warn_ratio` of its limit.",
    "slurm_attempt": "A Slurm attempt: the job id, `SLURM_RESTART_COUNT`, its nodes and those "
                     "left out.",
}


def event_classes() -> list[tuple[str, type[Any]]]:
    """(name, class) of every registered event, the contract's names first, then by name."""
    import launcher.backends
    from launcher.backends import engine_module
    from launcher.run.events import Event, EventType

    for module in EVENT_MODULES:
        importlib.import_module(module)
    for engine in pkgutil.iter_modules(launcher.backends.__path__):
        if engine.ispkg:
            engine_module(engine.name)
    order = {kind.value: position for position, kind in enumerate(EventType)}
    ours = [(name, cls) for name, cls in Event._BY_NAME.items()
            if cls.__module__.startswith("launcher.")]  # not an event a test defined
    return sorted(ours, key=lambda item: (order.get(item[0], len(order)), item[0]))


def summary(name: str, cls: type[Any]) -> str:
    """What an event records, in a sentence: its docstring, else :data:`SUMMARIES`. Raises
    ``LookupError`` when neither says it."""
    doc = docstring(cls)
    if doc and not doc.startswith(f"{cls.__name__}("):  # not the signature dataclass writes
        return doc
    if name in SUMMARIES:
        return SUMMARIES[name]
    raise LookupError(f"event {name} ({cls.__module__}.{cls.__name__}) has no docstring and no "
                      "line in launcher/reference/events_page.py's SUMMARIES")


def event_fields(cls: type[Any]) -> Iterator[tuple[str, str, str, str]]:
    """(field, type, default, note) of what an event's record holds, besides ``ts`` and
    ``event``. An event that records a failure holds the failure's fields."""
    from launcher.run.failures import TaskFailure

    for field in dataclasses.fields(cls):
        if field.type in ("TaskFailure", TaskFailure) and field.name == "failure":
            yield from _fields_of(TaskFailure)
            yield ("detection_latency_ms", "float", "", "from the task's death to tfcluster "
                   "seeing it")
            continue
        yield from _one(cls, field)


def _fields_of(cls: type[Any]) -> Iterator[tuple[str, str, str, str]]:
    for field in dataclasses.fields(cls):
        yield from _one(cls, field)


def _one(cls: type[Any], field: dataclasses.Field[Any]) -> Iterator[tuple[str, str, str, str]]:
    notes = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass) and klass.__module__.startswith("launcher"):
            notes.update(class_comments(klass))
    if field.default is not dataclasses.MISSING:
        default = repr(field.default)
    elif field.default_factory is not dataclasses.MISSING:
        default = repr(field.default_factory())
    else:
        default = ""
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    if kind == "TaskFailure | None":
        kind = "a task_failed record, or None"
    try:
        hint = typing.get_type_hints(cls).get(field.name)
    except NameError:  # a type imported for type checkers only: its text is shown as written
        hint = None
    note = notes.get(field.name, "")
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        kind = "str"
        note = (note + " " if note else "") + "One of " + ", ".join(
            f"`{member.value}`" for member in hint) + "."
    yield (field.name, kind, default, note)


def render() -> str:
    """The events page (Markdown)."""
    out = ["# Events\n", GENERATED.format(source="the event classes (`launcher/run/events.py` "
           "and the modules that add their own)"),
           "`RUN_DIR/events.jsonl` holds one JSON object a line, each with `ts` (epoch seconds) "
           "and `event` (its type) besides the fields below. `tfcluster status` reads them back; "
           "a reader should skip a torn last line and keep any field it does not know.\n"]
    classes = event_classes()
    out.append(table(("Event", "What it records"),
                     ((f"[`{name}`](#{name})", text(summary(name, cls)))
                      for name, cls in classes)))
    for name, cls in classes:
        out.append(f"## {name}\n")
        out.append(text(summary(name, cls)) + "\n")
        rows = [(code(field), code(kind), code(default) if default else "", text(note))
                for field, kind, default, note in event_fields(cls)]
        out.append(table(("Field", "Type", "Default", "Note"), rows))
    return "\n".join(out)
