"""Training throughput (steps/s) of the digits example with tfcluster's worker helpers, next to the
same example without them.

Run it with the project's interpreter (needs TensorFlow)::

    .venv/bin/python benchmarks/throughput.py [--steps 2000] [--repeats 6]

``worker/examples/digits.py`` as a user runs it (``worker.report`` every step, ``TrainingCheckpoint``
reading two local flags per step) is compared with the same example run with ``--no-helpers`` (no
report, no preemption check: only the helpers differ), and with ``worker/examples/pch_digits.py``
(the same MLP, data and batch size checkpointed by TensorFlow's own ``PreemptionCheckpointHandler``,
importing nothing of tfcluster). All run under ``tfcluster run`` on two local workers, interleaved,
``--steps`` steps each; digits with ``--checkpoint-every 0 --deterministic`` (one save at the end;
pch_digits saves only on a preemption and always enables op determinism).

Steps/s is measured on worker:0 from the step after a warm-up (a tenth of the steps, at least 20:
the first step traces the ``tf.function``) to the last one, the same way for every example: from
its own output lines (``[digits worker:0] step N ...`` every ``--log-every`` steps), stamped as
they reach this process through tfcluster's console on a pipe.

Each round runs every example once, back to back, in the order reversed every other round; an
example is compared with ``--no-helpers`` run by run (its steps/s over that of the ``--no-helpers``
run of the same round), and the median of those ratios is the figure. Comparing the medians of
the two series instead was too coarse: on the 2-core machine of ``RESULTS.md`` the runs of one
example spread over 97 to 152 steps/s within a series (falling as it went on), more than the
helpers cost; on the same code, series of six gave 0.99x and 0.94x, a series of three 0.92x.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from common import (
    REPO,
    BenchmarkError,
    CommandLog,
    Tfcluster,
    default_tfcluster,
    median,
    new_marker,
    progress,
    scratch,
    write_spec,
)

MARKER_ENV = "BENCH_THROUGHPUT_MARKER"
PCH_DIGITS = REPO / "worker" / "examples" / "pch_digits.py"
TASK = "worker:0"
LOG_EVERY = 10
RUN_TIMEOUT_S = 900.0
STEP_LINE = re.compile(r"\[(?:pch|digits) worker:0\] step (\d+) loss")


@dataclass(frozen=True)
class Job:
    key: str
    title: str
    module: str
    args: tuple[str, ...]
    health: Mapping[str, Any]

    def spec(self, marker: Mapping[str, str], steps: int) -> dict[str, Any]:
        return {
            "name": f"bench-{self.key.replace('_', '-')}",
            "entrypoint": {"module": self.module, "args": ["--steps", str(steps), *self.args]},
            "workdir": str(REPO),
            "env": {"TF_CPP_MIN_LOG_LEVEL": "2", **marker},
            "tasks": [{"type": "worker", "host": "localhost", "count": 2}],
            "restart": {"max_restarts": 0},
            "health": dict(self.health),
        }


_DIGITS_ARGS = ("--checkpoint-every", "0", "--deterministic", "--log-every", str(LOG_EVERY))
_NO_STEP_REPORTS = {"startup_timeout_s": None, "hang_timeout_s": None}
DIGITS = Job("digits", "digits (worker.report + TrainingCheckpoint)", "worker.examples.digits",
             _DIGITS_ARGS, {})
BARE = Job("digits_bare", "digits --no-helpers (no report, no preemption check)",
           "worker.examples.digits", (*_DIGITS_ARGS, "--no-helpers"), _NO_STEP_REPORTS)
PCH = Job("pch_digits", "pch_digits (no tfcluster helpers; TF's PreemptionCheckpointHandler)",
          "worker.examples.pch_digits", ("--log-every", str(LOG_EVERY)), _NO_STEP_REPORTS)


def jobs() -> list[Job]:
    """digits with and without the helpers, and pch_digits when this checkout has it."""
    return [DIGITS, BARE, PCH] if PCH_DIGITS.exists() else [DIGITS, BARE]


def warmup_steps(steps: int) -> int:
    return max(20, steps // 10)


def rate(points: Sequence[tuple[int, float]], after_step: int, what: str) -> float:
    """Steps/s between the first (step, time) past ``after_step`` and the last one."""
    window = sorted(p for p in points if p[0] > after_step)
    if len(window) < 2 or window[-1][1] <= window[0][1]:
        raise BenchmarkError(f"{what}: fewer than two step times after step {after_step} "
                             f"({len(window)}); train longer (--steps)")
    (s0, t0), (s1, t1) = window[0], window[-1]
    return (s1 - s0) / (t1 - t0)


def stamp_lines(stream: IO[bytes], into: list[tuple[float, str]]) -> threading.Thread:
    """A thread that appends (time.time(), line) for every line of ``stream`` until EOF."""
    def run() -> None:
        for raw in stream:
            into.append((time.time(), raw.decode("utf-8", "replace")))

    thread = threading.Thread(target=run, name="stamp-lines", daemon=True)
    thread.start()
    return thread


def output_points(lines: Sequence[tuple[float, str]]) -> list[tuple[int, float]]:
    points = []
    for stamp, line in lines:
        found = STEP_LINE.search(line)
        if found:
            points.append((int(found.group(1)), stamp))
    return points


def run_once(cli: Tfcluster, job: Job, steps: int, work: Path) -> float:
    data = job.spec({cli.marker_var: cli.marker}, steps)
    cli.commands.spec(f"throughput: {job.key}", data)
    spec = write_spec(work, data)
    run_dir = work / "run"
    args = ["run", str(spec), "--checkpoint-dir", str(work / "checkpoints"), "--run-dir",
            str(run_dir)]
    lines: list[tuple[float, str]] = []
    proc, _ = cli.popen(args, work, cwd=REPO, stdout=subprocess.PIPE,
                        note=f"spec: throughput: {job.key}")
    if proc.stdout is None:  # cannot happen with stdout=PIPE
        proc.kill()
        proc.wait()
        raise BenchmarkError(f"{job.key}: no pipe from tfcluster's stdout")
    reader = stamp_lines(proc.stdout, lines)
    try:
        code = proc.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise BenchmarkError(f"{job.key}: tfcluster did not finish in {RUN_TIMEOUT_S:.0f}s") from None
    finally:
        reader.join(timeout=10)
        proc.stdout.close()
        cli.check_no_leftovers(10.0)
    if code != 0:
        raise BenchmarkError(f"{job.key}: tfcluster exited {code}: "
                             + " | ".join((work / "cli.stderr").read_text().splitlines()[-3:]))
    return rate(output_points(lines), warmup_steps(steps), job.key)


@dataclass
class Results:
    job: Job
    by_round: dict[int, float] = field(default_factory=dict)  # steps/s, by round
    errors: list[str] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return list(self.by_round.values())


def round_order(all_results: Sequence[Results], index: int) -> list[Results]:
    """The examples in the order round ``index`` runs them: reversed every other round, so that
    neither side of a comparison always runs first (ABBA)."""
    return list(all_results) if index % 2 == 0 else list(reversed(all_results))


def measure(cli: Tfcluster, steps: int, repeats: int, tmp: Path) -> list[Results]:
    all_results = [Results(job) for job in jobs()]
    for index in range(repeats):
        for results in round_order(all_results, index):
            with scratch(tmp, f"rate-{results.job.key}-") as work:
                try:
                    results.by_round[index] = run_once(cli, results.job, steps, work)
                except BenchmarkError as exc:
                    results.errors.append(str(exc))
                    progress(f"{results.job.key} {index + 1}/{repeats} FAILED: {exc}")
                    continue
            progress(f"{results.job.key} {index + 1}/{repeats}: "
                     f"{results.by_round[index]:.1f} steps/s")
    return all_results


# --- report -------------------------------------------------------------------------------------


def paired_ratio(of: Results, base: Results) -> float | None:
    """The median, over the rounds where both ran, of ``of``'s steps/s over ``base``'s in the
    same round: runs minutes apart differ by more than the helpers cost (the machine drifts over
    a series), two runs back to back much less."""
    rounds = sorted(of.by_round.keys() & base.by_round.keys())
    return median([of.by_round[i] / base.by_round[i] for i in rounds]) if rounds else None


def helpers_ratio(all_results: Sequence[Results]) -> float | None:
    """Steps/s of digits with the helpers over digits without them: :func:`paired_ratio`."""
    found = {r.job.key: r for r in all_results}
    if DIGITS.key in found and BARE.key in found:
        return paired_ratio(found[DIGITS.key], found[BARE.key])
    return None


def table(all_results: Sequence[Results], steps: int) -> list[str]:
    lines = [
        f"| example | runs | steps/s on {TASK}, median [min-max] (steps {warmup_steps(steps) + 1}"
        f"..{steps}) | vs digits without helpers, run by run: median [min-max] |",
        "|---|---:|---:|---:|",
    ]
    base = next((r for r in all_results if r.job is BARE), None)
    for r in all_results:
        if not r.rates:
            lines.append(f"| {r.job.title} | 0 | FAILED | - |")
            continue
        pairs = [] if base is None or r is base else \
            [r.by_round[i] / base.by_round[i] for i in r.by_round.keys() & base.by_round.keys()]
        versus = f"{median(pairs):.3f}x [{min(pairs):.2f}-{max(pairs):.2f}]" if pairs else "-"
        lines.append(f"| {r.job.title} | {len(r.rates)} | {median(r.rates):.1f} "
                     f"[{min(r.rates):.1f}-{max(r.rates):.1f}] | {versus} |")
    for r in all_results:
        lines += [f"- {r.job.key}: failed run (not counted): {e}" for e in dict.fromkeys(r.errors)]
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps per run (default 2000)")
    parser.add_argument("--repeats", type=int, default=6, help="runs per example (default 6)")
    parser.add_argument("--tfcluster", type=shlex.split, default=default_tfcluster(),
                        help="how to run tfcluster (default: the console script beside this python)")
    args = parser.parse_args(argv)
    if args.steps < 50 or args.repeats < 1:
        parser.error("--steps must be at least 50 and --repeats at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cli = Tfcluster(tuple(args.tfcluster), MARKER_ENV, new_marker(), CommandLog())
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-throughput-") as tmp:
            all_results = measure(cli, args.steps, args.repeats, Path(tmp))
    finally:
        killed = cli.kill_leftovers()
    print("\n".join(table(all_results, args.steps)))
    if killed:
        print(f"- leftover processes (killed): {killed}")
    return 1 if killed or any(r.errors for r in all_results) else 0


if __name__ == "__main__":
    sys.exit(main())
