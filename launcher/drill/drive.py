"""``tfcluster drill``: a spec with ``--fault``\\ s (one scenario) or a drill file (many), a baseline
when asked for, every scenario run and judged, the report written and the table printed.

The exit code is 0 only when every scenario passed (see :func:`launcher.drill.session.judge`);
otherwise 1, after naming each scenario that failed and why.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher.drill import plot, report
from launcher.drill.coordinator_loss import ChildRunner
from launcher.drill.faults import Action, Fault
from launcher.drill.host_loss import locate_losses
from launcher.drill.session import (
    Plan,
    RunJob,
    ScenarioResult,
    partition_links,
    run_baseline,
    run_scenario,
)
from launcher.drill.suite import Scenario
from launcher.drill.verdict import Baseline, baseline_of
from launcher.errors import TfclusterError, UsageError
from launcher.run.directory import EVENTS_FILE
from launcher.spec.model import ClusterSpec


@dataclass(frozen=True)
class DrillRequest:
    plan: Plan
    scenarios: tuple[Scenario, ...]
    repeat: int
    run_dir: Path
    baseline: bool
    baseline_from: Path | None
    single: bool  # one scenario from the command line: its run dir is the drill's


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _baseline(request: DrillRequest, run_job: RunJob) -> Baseline | None:
    if request.baseline_from is not None:
        if not (request.baseline_from / EVENTS_FILE).exists():
            raise TfclusterError(f"--baseline-from {request.baseline_from}: not a run directory "
                                 "(no events.jsonl)")
        found = baseline_of(request.baseline_from)
        if found.result is None:
            raise TfclusterError(f"--baseline-from {request.baseline_from}: its tasks printed no "
                                 "result line (weights_sha256=... or tfcluster-result: ...)")
        return found
    if not request.baseline:
        return None
    _say("drill: baseline run (no faults)")
    found, code = run_baseline(request.plan, request.run_dir / "baseline", run_job)
    if code != 0:
        raise TfclusterError(f"drill: the baseline run failed (exit code {code}); see "
                             f"{request.run_dir / 'baseline'}")
    if found.result is None:
        raise TfclusterError("drill: the baseline's tasks printed no result line "
                             "(weights_sha256=... or tfcluster-result: ...): nothing to compare")
    _say(f"drill: baseline result {found.result}"
         + ("" if found.steps is None else f" at step {found.steps}"))
    return found


def refuse_unbounded_hangs(spec: ClusterSpec, faults: Sequence[Fault]) -> None:
    """A ``stop`` fault (SIGSTOP: a hang) ends only by the hang deadline; without
    ``health.hang_timeout_s`` the drill would never end. UsageError, before anything runs."""
    stops = [str(f) for f in faults if f.action is Action.STOP]
    if stops and spec.health.hang_timeout_s is None:
        raise UsageError(f"tfcluster drill: {stops[0]} hangs a task, and only "
                         "health.hang_timeout_s ends a hang, but the spec has none: set "
                         "health.hang_timeout_s (e.g. 60) for this drill")


def run_drill(request: DrillRequest, run_job: RunJob, child: ChildRunner) -> int:
    for scenario in request.scenarios:  # refuse what cannot be done here, before any run
        refuse_unbounded_hangs(request.plan.spec, scenario.faults)
        partition_links(request.plan.spec, scenario.faults)
        locate_losses(request.plan.spec, scenario.faults)
    request.run_dir.mkdir(parents=True, exist_ok=True)
    baseline = _baseline(request, run_job)
    results: list[ScenarioResult] = []
    for scenario in request.scenarios:
        for k in range(request.repeat):
            name = scenario.name if request.repeat == 1 else f"{scenario.name}-{k + 1}"
            run_dir = request.run_dir if request.single else request.run_dir / name
            _say(f"drill: scenario {name}: {', '.join(str(f) for f in scenario.faults)}")
            results.append(run_scenario(request.plan, scenario.name, scenario.faults, repeat=k,
                                        run_dir=run_dir, run_job=run_job, child=child,
                                        baseline=baseline))
    picture = plot.draw(results, request.run_dir / "drill.png")
    report.write(request.run_dir, results, seed=request.plan.seed, baseline=baseline,
                 baseline_from=None if request.baseline_from is None
                 else str(request.baseline_from), picture=picture)
    for line in report.table(results):
        print(line)
    for note in report.notes(results):
        print(note)
    for problem in report.problems(results):
        print(f"FAILED {problem}")
    print(f"drill report: {request.run_dir / 'drill.md'}"
          + (f"; picture: {picture}" if picture else ""))
    return 0 if all(r.passed for r in results) else 1


def single_scenario(faults: Sequence[Fault]) -> Scenario:
    return Scenario("drill", tuple(faults))
