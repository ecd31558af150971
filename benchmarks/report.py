"""The published report of one ``run_all.py`` run (``benchmarks/RESULTS.md``): what was measured
(:class:`Measured`, with the :class:`Sizes` it was measured at), rendered as Markdown sections in a
fixed order, with a table of every target against its value from this same run."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field

import coordinator_load
import early_kills
import exit_detection
import launch_overhead
import launch_report
import recovery_report
import throughput
import warm_spares
from common import REPO, CommandLog, median, percentile
from machine import describe
from targets import (
    COORDINATOR_CPU_PCT,
    COORDINATOR_RSS_MIB,
    DETECTION_P95_MS,
    HELPERS_RATIO,
    IDLE_N,
    LAUNCH_N,
    RESTART_S,
    WARM_COLD_RATIO,
    Target,
)

#: The labels of the drill variants.
LOCAL, SSH, WARM = "local", "ssh (127.0.0.1)", "warm spares"

#: The section headings, in order (tests/unit/project/test_benchmarks_smoke.py checks them).
MACHINE = "## Machine"
TARGETS = "## Targets"
LAUNCH = "## 1. Launch overhead"
DETECTION = "## 2. Failure detection"
RESTART = "## 3. Restart latency and recovery"
WARM_SPARES = "## 4. Warm spares: recovery cold vs warm"
LOAD = "## 5. Coordinator CPU and memory with idle tasks"
THROUGHPUT = "## 6. Training throughput"
COMMANDS = "## Commands run"
LEFTOVERS = "## Leftover processes"


@dataclass(frozen=True)
class Sizes:
    """How many runs of each part, and how large (``run_all.FULL``, ``run_all.QUICK``)."""

    launch_sizes: tuple[int, ...]
    launch_repeats: int
    exit_detections: int
    drills: int  # local drills of the trivial job, per variant (cold, warm)
    ssh_drills: int
    tf_drills: int  # per variant
    idle_sizes: tuple[int, ...]
    idle_window_s: float
    rate_steps: int
    rate_repeats: int


@dataclass
class Measured:
    """Everything measured, and per section what could not be (and why)."""

    launch: list[launch_overhead.SizeResult] = field(default_factory=list)
    exit_detection: list[exit_detection.DetectionSample] = field(default_factory=list)
    exit_detection_errors: list[str] = field(default_factory=list)
    local: list[recovery_report.Results] = field(default_factory=list)  # trivial job: cold [, warm]
    ssh: list[recovery_report.Results] = field(default_factory=list)
    digits: list[recovery_report.Results] = field(default_factory=list)  # cold [, warm]
    tf_import_s: float | None = None
    warm: warm_spares.Probe | None = None
    early_kills: list[early_kills.Moment] = field(default_factory=list)  # plain MWMS, cold/warm
    load: list[coordinator_load.LoadSample] = field(default_factory=list)
    load_errors: list[str] = field(default_factory=list)
    rates: list[throughput.Results] = field(default_factory=list)
    notes: dict[str, list[str]] = field(default_factory=dict)  # heading -> lines
    failed: bool = False

    def note(self, heading: str, line: str) -> None:
        self.notes.setdefault(heading, []).append(line)


@dataclass(frozen=True)
class RunInfo:
    """How the run went, for the report's head and its commands."""

    quick: bool
    tf: bool
    ssh: bool
    began: datetime.datetime
    took_s: float
    load_before: str
    load_after: str
    invocation: str  # the command line of this run
    bytecode: str  # how tfcluster's modules were loaded (machine.compile_bytecode)


def labelled(all_results: Sequence[recovery_report.Results], label: str) -> recovery_report.Results | None:
    return next((r for r in all_results if r.label == label and r.drills), None)


@dataclass(frozen=True)
class TargetRow:
    target: Target
    value: float | None
    shown: str  # the value as printed, or why it was not measured

    def line(self) -> str:
        t = self.target
        if self.value is None:
            return f"| {t.what} | {self.shown} | {t.text} | - | not measured |"
        ratio = t.ratio(self.value)
        digits = 4 if ratio < 0.01 else 3 if 0.995 <= ratio < 1.005 else 2  # near 1: which side
        return f"| {t.what} | {self.shown} | {t.text} | {ratio:.{digits}f} | {t.verdict(self.value)} |"


def target_rows(m: Measured, run: RunInfo) -> list[TargetRow]:
    rows = []
    for target, got in launch_report.launch_ratios(m.launch):
        rows.append(TargetRow(target, got, f"{got:.2f}x") if got is not None else TargetRow(
            target, None, "not measured" + (" (--quick: N = 1, 8 only)" if run.quick else "")))
    local = labelled(m.local, LOCAL)
    if local is not None:
        p95 = percentile([d.detection_ms for d in local.drills], 95)
        rows.append(TargetRow(DETECTION_P95_MS, p95, f"{p95:.2f} ms (local drills)"))
        restart = median([d.restart_s for d in local.drills])
        rows.append(TargetRow(RESTART_S, restart, f"{restart:.3f} s (local drills)"))
    else:
        rows += [TargetRow(DETECTION_P95_MS, None, "not measured"),
                 TargetRow(RESTART_S, None, "not measured")]
    rows.append(warm_row(m, run))
    rows += [TargetRow(*row) for row in early_kills.target_values(m.early_kills, run.tf)]
    helpers = throughput.helpers_ratio(m.rates)
    rows.append(TargetRow(HELPERS_RATIO, helpers, f"{helpers:.3f}x") if helpers is not None else
                TargetRow(HELPERS_RATIO, None, "not measured" + ("" if run.tf else " (--no-tf)")))
    idle = [s for s in m.load if s.n == IDLE_N]
    if idle:
        cpu, rss = idle[0].coordinator.cpu_pct, idle[0].coordinator.rss_max_mib
        rows += [TargetRow(COORDINATOR_CPU_PCT, cpu, f"{cpu:.2f}%"),
                 TargetRow(COORDINATOR_RSS_MIB, rss, f"{rss:.1f} MiB")]
    else:
        rows += [TargetRow(COORDINATOR_CPU_PCT, None, "not measured"),
                 TargetRow(COORDINATOR_RSS_MIB, None, "not measured")]
    return rows


def warm_row(m: Measured, run: RunInfo) -> TargetRow:
    if not run.tf:
        return TargetRow(WARM_COLD_RATIO, None, "not measured (--no-tf)")
    if m.warm is None or not m.warm.available:
        return TargetRow(WARM_COLD_RATIO, None, "not measured: warm spares not available in "
                         "this build")
    cold, warm = labelled(m.digits, LOCAL), labelled(m.digits, WARM)
    if cold is None or warm is None:
        return TargetRow(WARM_COLD_RATIO, None, "not measured: the digits drills failed")
    ratio = median([d.recovery_s for d in warm.drills]) / median([d.recovery_s for d in cold.drills])
    return TargetRow(WARM_COLD_RATIO, ratio, f"{ratio:.2f}x")


def targets_section(m: Measured, run: RunInfo) -> list[str]:
    return [TARGETS, "",
            "Each measured value comes from this run; \"measured / limit\" below 1 is inside the "
            "target.", "",
            "| target | measured | limit | measured / limit | verdict |",
            "|---|---|---|---:|---|",
            *(row.line() for row in target_rows(m, run))]


def launch_section(m: Measured, sizes: Sizes) -> list[str]:
    lines = [LAUNCH, "",
             "`tfcluster local -n N --quiet -- python -c \"$STAMP_CODE\" FILE` from `Popen` until "
             "every task has appended its `time.time()` to FILE, against the same N processes "
             "from a bare `subprocess.Popen` loop (each in its own session, as the agent starts "
             "them); sizes interleaved, one uncounted warm-up of each first. tfcluster's agent "
             "starts at most as many tasks at a time as it has CPUs (`startup_concurrency`, "
             "each until it writes, sleeps or exits, at most 0.25 s); \"bare loop, CPUs at a "
             "time\" is the bare loop paced the same way (it waits for one of its processes to "
             "exit before it starts another once as many run as there are CPUs): how much pacing "
             "alone saves. \"Agent alone\" is `python -m worker.agent` given at once the launch "
             "message that this `tfcluster local` sends its agent, with no coordinator at all: "
             "the part of the overhead that is the agent's (its own interpreter start included). "
             "\"Least coordinator\" (`least_coordinator.py`) is a process that starts that "
             "agent, parses the same command line, validates the spec, plans and sends the "
             "launch, and does nothing else: Python's start, the spec models and the planner, "
             "with none of the job machinery, which is what tfcluster does before it sends its "
             "first launch (the rest of its start-up runs while the tasks start). "
             + launch_report.END_TO_END, ""]
    if m.launch:
        lines += launch_report.launch_table(m.launch, sizes.launch_repeats, True)
    if LAUNCH_N in sizes.launch_sizes:
        lines += ["", *(f"- {line}" for line in launch_report.launch_verdicts(m.launch))]
    return lines


def detection_section(m: Measured) -> list[str]:
    lines = [DETECTION, ""]
    drills = [r for r in (*m.local, *m.ssh) if r.label in (LOCAL, SSH)]
    if drills:
        w = drills[0].workload
        lines += [f"`tfcluster drill SPEC --task {w.task} --at-step {w.at_step} --fault kill` of "
                  f"the trivial 2-task job (the fake trainer, `tests/support/fake_trainer.py`, 2 workers, "
                  f"{w.steps} steps of 0.02 s, worker:0 checkpointing every {w.checkpoint_every}; "
                  "`restart.backoff_s: 0`): locally, and with both tasks on a throwaway sshd on "
                  "127.0.0.1 (its own host key and client key in a temporary directory, an empty "
                  "HOME for tfcluster).", ""]
        lines += [*recovery_report.detection_table(
            drills, "### SIGKILL of worker:1 by the drill (the agent sends it)"), ""]
    if m.exit_detection:
        lines += [*exit_detection.detection_table(m.exit_detection, m.exit_detection_errors), ""]
    lines += recovery_report.error_lines(drills)
    return lines


def restart_table(all_results: Sequence[recovery_report.Results]) -> list[str]:
    lines = [
        "### Restart latency: death -> every task of the next attempt started (seconds)",
        "",
        "| where | drills | from `task_failed.died_at`: p50 | p95 | min-max "
        "| from `fault_injected.ts`: p50 | target |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in all_results:
        if not r.drills:
            continue
        values = [d.restart_s for d in r.drills]
        fault = [d.restart_from_fault_s for d in r.drills]
        verdict = f"median {RESTART_S.text}: {RESTART_S.verdict(median(values))}" \
            if r.label == LOCAL else ""
        lines.append(f"| {r.label} | {len(values)} | {median(values):.3f} "
                     f"| {percentile(values, 95):.3f} | {min(values):.3f}-{max(values):.3f} "
                     f"| {median(fault):.3f} | {verdict} |")
    return lines


def restart_section(m: Measured) -> list[str]:
    drills = [r for r in (*m.local, *m.ssh) if r.label in (LOCAL, SSH) and r.drills]
    lines = [RESTART, "",
             "From the drills of section 2. Death is `task_failed.died_at` (the agent's clock as "
             "it reaped the killed task); \"next attempt started\" is the last `task_started` of "
             "attempt 1. Recovery is death -> the first `task_progress` of attempt 1, split into "
             "detect, stop, plan, spawn, import and first step.", ""]
    if not drills:
        return lines
    lines += restart_table([*drills, *(r for r in m.local if r.label == WARM and r.drills)])
    lines += ["", *recovery_report.breakdown_table(drills), ""]
    lost = sorted({d.steps_lost for r in drills for d in r.drills})
    w = drills[0].workload
    lines.append(f"- steps lost per drill: {'/'.join(map(str, lost))} (killed on the first report at "
                 f"or past step {w.at_step}, a checkpoint every {w.checkpoint_every} steps)")
    lines += recovery_report.setup_lines(drills, 0.0)[2:]
    return lines


def ratio_line(all_results: Sequence[recovery_report.Results], what: str, target: Target | None) -> str:
    cold, warm = labelled(all_results, LOCAL), labelled(all_results, WARM)
    if cold is None or warm is None:
        return f"- {what}: warm / cold not measured (no successful drill of one of them)"
    c = median([d.recovery_s for d in cold.drills])
    w = median([d.recovery_s for d in warm.drills])
    verdict = f" (target {target.text}: {target.verdict(w / c)})" if target else ""
    return f"- {what}: recovery warm {w:.3f} s / cold {c:.3f} s = **{w / c:.2f}x**{verdict}"


def warm_section(m: Measured) -> list[str]:
    lines = [WARM_SPARES, ""]
    if m.warm is None:
        return lines
    if not m.warm.available:
        lines += ["**warm spares: not available in this build** (`tfcluster validate` rejects "
                  f"`restart.warm_spares: true`: {m.warm.detail}). Only the cold figures are "
                  "measured.", ""]
    else:
        imports = ("its heavy module (`entrypoint.preload`: `tensorflow` for digits, "
                   "`worker.reporting` for the fake trainer)") if m.warm.preload else \
            "what the build imports by default (this build has no `entrypoint.preload`)"
        lines += ["warm spares: available (`tfcluster validate` accepts `restart.warm_spares: "
                  "true`). Each cold drill is followed by the same drill with warm spares; the "
                  f"spares import {imports}.", ""]
        if labelled(m.local, WARM) is not None:
            lines += ["### Fake trainer (the trivial 2-task job of section 2)", "",
                      *recovery_report.breakdown_table(m.local, "####"), "",
                      ratio_line(m.local, "fake trainer", None),
                      *recovery_report.cold_reason_lines(m.local), ""]
    if m.digits:
        digits = m.digits[0].workload
        lines += [f"### digits (TensorFlow MWMS, 2 workers, {digits.steps} steps, checkpoint every "
                  f"{digits.checkpoint_every}, worker:1 killed at step {digits.at_step}, "
                  "`restart.backoff_s: 0`)", "",
                  *recovery_report.breakdown_table(m.digits, "####"), ""]
        if m.warm.available:
            lines.append(ratio_line(m.digits, "digits", WARM_COLD_RATIO))
            lines += recovery_report.cold_reason_lines(m.digits)
        colds = [d.cold.total_s for r in m.digits for d in r.drills]
        if colds:
            lines.append(f"- reference: a cold start of the same job (Popen -> first step, the "
                         f"drills' attempt 0): {median(colds):.2f} s")
        if m.tf_import_s is not None:
            lines.append(f"- reference: `python -c 'import tensorflow'` alone: "
                         f"{m.tf_import_s:.2f} s")
        lines += recovery_report.error_lines(m.digits)
    return [*lines, *early_kills.section(m.early_kills)]


def load_section(m: Measured, sizes: Sizes) -> list[str]:
    lines = [LOAD, "",
             "`tfcluster local -n N --quiet -- python benchmarks/tasks/idle_task.py GO STOP`: tasks "
             "that report a step every second and do nothing else. Once every task has reported "
             f"one, and a second more, the coordinator's `cpu_times` (user + system) over a "
             f"{sizes.idle_window_s:g} s window and its RSS every 0.5 s; the one local agent the "
             "same way, for reference. (CPU times tick every 10 ms: "
             f"±{1 / sizes.idle_window_s:.2f}% of one core over this window.)", ""]
    if m.load:
        lines += coordinator_load.table(m.load)
        lines += ["", *coordinator_load.verdicts(m.load)]
    lines += [f"- failed: {e}" for e in m.load_errors]
    return lines


def throughput_section(m: Measured, sizes: Sizes) -> list[str]:
    lines = [THROUGHPUT, ""]
    if not m.rates:
        return lines
    lines += ["`worker/examples/digits.py` as a user runs it (`worker.report` every step, "
              "`TrainingCheckpoint` reading two local flags per step: under tfcluster the "
              "coordinator picks a preemption's stop step, no collective runs), the same example "
              "with `--no-helpers` (no report, no preemption check: only the helpers differ), and "
              "`worker/examples/pch_digits.py` (the same MLP, data and batch size under "
              "TensorFlow's own `PreemptionCheckpointHandler`, nothing of tfcluster imported). "
              f"All under `tfcluster run`, 2 local workers, {sizes.rate_steps} steps, in rounds "
              "(each example once, reversed every other round), compared round by round; steps/s "
              f"from the output (a line every {throughput.LOG_EVERY} steps).", ""]
    return [*lines, *throughput.table(m.rates, sizes.rate_steps)]


def commands_section(commands: CommandLog, invocation: str) -> list[str]:
    lines = [COMMANDS, "", "This report:", "", "```sh", invocation, "```", "",
             "What it ran (`$TMP` is its temporary directory, `XXXXXXXX` the random part of a "
             "scratch directory, `$MARKER` the marker value; counts are runs):", "", "```sh"]
    lines += [f"{cmd}{f'   # x{n}' if n > 1 else ''}" for cmd, n in commands.commands.items()]
    lines += ["```", ""]
    for literal, name in commands.aliases.items():
        if any(name in cmd for cmd in commands.commands):
            lines += [f"`{name}`:", "", "```python", literal.rstrip("\n"), "```", ""]
    for title, text in commands.specs.items():
        lines += [f"spec: {title} (the first one written):", "", "```yaml",
                  text.rstrip("\n"), "```", ""]
    return lines


def leftovers_section(marker_var: str, killed: Sequence[int], ssh: bool) -> list[str]:
    if killed:
        return [LEFTOVERS, "", f"**{len(killed)} process(es) with {marker_var} were still "
                f"running at the end and were killed**: {list(killed)}"]
    sessions = ", no sshd session outlived its run" if ssh else ""
    return [LEFTOVERS, "", f"None: no process with {marker_var}=$MARKER was left after any run "
            f"or at the end (checked with psutil){sessions}, and the temporary directories were "
            "removed."]


def machine_section(run: RunInfo) -> list[str]:
    skipped = [name for flag, name in ((not run.tf, "the TensorFlow parts (--no-tf)"),
                                       (not run.ssh, "the SSH parts (--skip-ssh)")) if flag]
    return [MACHINE, "", *describe(REPO).lines(), f"- bytecode: {run.bytecode}",
            f"- load average (1/5/15 min): {run.load_before} before the run, {run.load_after} "
            "after",
            f"- run: {run.began:%Y-%m-%d %H:%M:%S %Z}, {run.took_s // 60:.0f} min "
            f"{run.took_s % 60:.0f} s"
            + (" with `--quick` (smoke-test sizes: figures not to quote)" if run.quick else ""),
            f"- skipped: {', '.join(skipped)}" if skipped else "- skipped: nothing"]


def render(m: Measured, commands: CommandLog, *, marker_var: str, killed: Sequence[int],
           sizes: Sizes, run: RunInfo) -> str:
    """The whole report, as Markdown; scratch paths and the marker shown as in ``commands``."""
    sections = [
        ["# tfcluster benchmarks", "",
         "Written by `benchmarks/run_all.py`: every figure below was measured in this one run, "
         "and every ratio compares figures of this run."],
        machine_section(run),
        targets_section(m, run),
        launch_section(m, sizes),
        detection_section(m),
        restart_section(m),
        warm_section(m),
        load_section(m, sizes),
        throughput_section(m, sizes),
        commands_section(commands, run.invocation),
        leftovers_section(marker_var, killed, bool(m.ssh)),
    ]
    out = []
    for lines in sections:
        notes = m.notes.get(lines[0], [])
        out.append("\n".join([*lines, *([""] if notes and lines[-1] else []), *notes]).rstrip())
    return commands.show_paths("\n\n".join(out)) + "\n"
