"""A drill file: a spec, scenarios (each a name and a list of faults), ``repeat`` and ``seed``.

```yaml
spec: ../local-chief-2workers.yaml   # relative to this file
seed: 7                              # random targets and triggers (default 0)
repeat: 1                            # every scenario this many times (default 1)
baseline: true                       # run the job once without faults and check every result
random_horizon: 300                  # random triggers draw a step in 1..this (default 100)
scenarios:
  - name: kill-worker
    faults: [kill:worker:1:at-step=120]
```

Loaded like a spec: every problem at once, each with its field path (``scenarios[1].faults[0].
trigger``), in one :class:`~launcher.spec.errors.SpecError`; no traceback. A YAML mapping with a
``scenarios`` key is a drill file, anything else a spec (:func:`is_suite`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from launcher.drill.faults import Fault, FaultProblem, check_targets, parse_fault
from launcher.drill.injector import DEFAULT_RANDOM_HORIZON
from launcher.spec.errors import SpecError, SpecProblem
from launcher.spec.loading import MAX_SPEC_BYTES, load_spec
from launcher.spec.model import ClusterSpec
from launcher.spec.yaml_text import parse_yaml

_FIELDS = ("spec", "seed", "repeat", "baseline", "random_horizon", "scenarios")
_SCENARIO_FIELDS = ("name", "faults")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_REPEAT = 1000


@dataclass(frozen=True)
class Scenario:
    name: str
    faults: tuple[Fault, ...]


@dataclass(frozen=True)
class DrillSuite:
    source: Path
    spec_path: Path
    spec: ClusterSpec
    scenarios: tuple[Scenario, ...]
    seed: int = 0
    repeat: int = 1
    baseline: bool = False
    random_horizon: int = DEFAULT_RANDOM_HORIZON


def read_text(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            return handle.read(MAX_SPEC_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        raise SpecError(str(path), [SpecProblem("", f"cannot read: {exc.strerror}")]) from None


def is_suite(path: Path) -> bool:
    """Whether the YAML file at ``path`` is a drill file (a mapping with ``scenarios``)."""
    try:
        data = parse_yaml(read_text(path), str(path))
    except SpecError:
        return False  # loading it as a spec reports the problem
    return isinstance(data, Mapping) and "scenarios" in data


def _whole(value: object, path: str, low: int, high: int, problems: list[SpecProblem]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        problems.append(SpecProblem(path, f"must be a whole number from {low} to {high}, "
                                    f"not {value!r}"))
        return low
    return value


@dataclass(frozen=True)
class _Written:
    """A scenario with where it and each of its faults were written (for field paths)."""

    scenario: Scenario
    path: str
    positions: tuple[int, ...]


def _scenarios(raw: object, problems: list[SpecProblem]) -> list[_Written]:
    if not isinstance(raw, list) or not raw:
        problems.append(SpecProblem("scenarios", "must be a non-empty list of "
                                    "{name: NAME, faults: [ACTION:TARGET[:TRIGGER], ...]}"))
        return []
    scenarios = []
    names: set[str] = set()
    for i, item in enumerate(raw):
        where = f"scenarios[{i}]"
        if not isinstance(item, Mapping):
            problems.append(SpecProblem(where, "must be a mapping {name: ..., faults: [...]}"))
            continue
        problems.extend(SpecProblem(f"{where}.{key}", "unknown field (a scenario has name and "
                                    "faults)") for key in item if key not in _SCENARIO_FIELDS)
        name = item.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(SpecProblem(f"{where}.name", "must be a name of letters, digits, "
                                        f"'.', '_' or '-' (up to 64), not {name!r}"))
            name = f"scenario-{i}"
        elif name in names:
            problems.append(SpecProblem(f"{where}.name", f"{name!r} is used by another scenario"))
        names.add(name)
        texts = item.get("faults")
        if not isinstance(texts, list) or not texts:
            problems.append(SpecProblem(f"{where}.faults", "must be a non-empty list of faults "
                                        "ACTION:TARGET[:TRIGGER]"))
            continue
        faults = []
        positions = []
        for j, text in enumerate(texts):
            try:
                faults.append(parse_fault(text))
                positions.append(j)
            except FaultProblem as problem:
                part = f".{problem.part}" if problem.part else ""
                problems.append(SpecProblem(f"{where}.faults[{j}]{part}",
                                            f"{problem.message} (in {text!r})"))
        scenarios.append(_Written(Scenario(name, tuple(faults)), f"{where}.faults",
                                  tuple(positions)))
    return scenarios


def load_suite(path: Path) -> DrillSuite:
    """The drill file at ``path``, validated, with its spec loaded."""
    source = str(path)
    data = parse_yaml(read_text(path), source)
    if not isinstance(data, Mapping):
        raise SpecError(source, [SpecProblem("", "a drill file is a mapping with spec and "
                                             "scenarios")])
    problems = [SpecProblem(str(key), f"unknown field (a drill file has {', '.join(_FIELDS)})")
                for key in data if key not in _FIELDS]
    spec_field = data.get("spec")
    spec: ClusterSpec | None = None
    spec_path = path.parent
    if not isinstance(spec_field, str) or not spec_field:
        problems.append(SpecProblem("spec", "must be the path of a spec file (relative to the "
                                    "drill file)"))
    else:
        spec_path = (path.parent / spec_field).resolve()
        if not spec_path.is_file():
            problems.append(SpecProblem("spec", f"no spec file {str(spec_path)!r}"))
        else:
            spec = load_spec(spec_path)  # its own problems, with its own paths
    seed = _whole(data.get("seed", 0), "seed", 0, 2**32 - 1, problems)
    repeat = _whole(data.get("repeat", 1), "repeat", 1, MAX_REPEAT, problems)
    horizon = _whole(data.get("random_horizon", DEFAULT_RANDOM_HORIZON), "random_horizon", 1,
                     10**9, problems)
    baseline = data.get("baseline", False)
    if not isinstance(baseline, bool):
        problems.append(SpecProblem("baseline", f"must be true or false, not {baseline!r}"))
    written = _scenarios(data.get("scenarios"), problems)
    if spec is not None:
        slots = spec.task_slots()
        tasks = [str(s.task) for s in slots]
        hosts = sorted({s.host for s in slots})
        for item in written:
            problems += check_targets(item.scenario.faults, tasks, hosts, item.path,
                                      item.positions)
    if problems or spec is None:
        raise SpecError(source, problems)
    return DrillSuite(path, spec_path, spec, tuple(w.scenario for w in written), seed=seed,
                      repeat=repeat,
                      baseline=bool(baseline), random_horizon=horizon)
