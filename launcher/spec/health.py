"""The spec's sections that keep a job healthy: ``restart`` (how often and how soon it is
restarted, what counts as a preemption, warm spares) and ``health`` (the deadlines after which a
task counts as stuck, hung or slow), with the duration and exit-code field types they use."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from launcher.spec.errors import FieldProblems
from launcher.spec.failure_rules import FailureRule
from launcher.spec.limits import check_heartbeat_interval, check_restarts, check_seconds
from worker.wire.env import DO_NOT_RESTART_EXIT_CODE, PREEMPTION_EXIT_CODE, TF_RESTART_EXIT_CODE

Seconds = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False),
                    AfterValidator(check_seconds)]
#: A duration that may be zero (no wait).
Delay = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False), AfterValidator(check_seconds)]
#: A process exit code a task can end with (0 is success, so never a preemption).
ExitCode = Annotated[int, Field(strict=True, ge=1, le=255)]

#: TensorFlow's PreemptionCheckpointHandler (42; 143 on GCE) and the worker helpers (143).
DEFAULT_PREEMPTION_EXIT_CODES = (TF_RESTART_EXIT_CODE, PREEMPTION_EXIT_CODE)

#: Each model's validator is built when a spec is first validated (``defer_build``), as one
#: schema for the whole spec, not once per section at import: tfcluster starts a few ms sooner.
_FROZEN = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class RestartSpec(BaseModel):
    """How often the job (and, under ParameterServerStrategy, a single task) is restarted after
    a task fails, and how long to wait between."""

    model_config = _FROZEN

    max_restarts: Annotated[int, Field(strict=True, ge=0), AfterValidator(check_restarts)] = Field(default=3,
        description="Restarts of the whole job after failures (preemptions that saved are not counted).")
    backoff_s: Delay = Field(default=1.0,
        description="Wait before the first restart; doubled at each restart in a row.")
    backoff_max_s: Delay = Field(default=30.0, description="Longest wait between restarts.")
    crash_loop_attempts: Annotated[int, Field(strict=True, ge=1)] | None = Field(default=3,
        description=("Give up early when this many consecutive failed attempts made no checkpoint progress "
                     "(a crash loop); null turns the check off."))
    preemption_exit_codes: Annotated[list[ExitCode], Field(min_length=1)] = Field(default=list(
        DEFAULT_PREEMPTION_EXIT_CODES),
        description=("Exit codes that mean \"saved, restart me\" (a graceful preemption). Such a restart is "
                     "not counted against `max_restarts` when a newer checkpoint or a preemption notice "
                     "shows it was one; the other tasks get the full `health.grace_period_s` to finish their "
                     "save."))
    warm_spares: Annotated[bool, Field(strict=True)] = Field(default=False,
        description=("Keep, on every host, one pre-started interpreter per task that has already imported "
                     "`entrypoint.preload`: a restart hands the new attempt to it instead of starting cold."))
    spare_fill_delay_s: Delay = Field(default=30.0,
        description=("With warm spares, the latest the spares start after an attempt started. They start "
                     "at once when a step is reported, the attempt's first checkpoint appears or the "
                     "tasks' start-up CPU demand has settled."))
    max_task_restarts: Annotated[int, Field(strict=True, ge=0),
                                 AfterValidator(check_restarts)] = Field(default=10,
        description=("ParameterServerStrategy: restarts of single tasks (a worker rejoining while the chief "
                     "trains on), over the whole job; `max_restarts` counts the restarts of the training "
                     "itself (the chief, from its checkpoint)."))
    task_crash_loop: Annotated[int, Field(strict=True, ge=1)] | None = Field(default=3,
        description=("A task that fails this many times in a row, each time within `task_crash_window_s` of "
                     "its start, is in a crash loop: it is left out and the job goes on without it."))
    task_crash_window_s: Seconds = Field(default=10.0,
        description=("See task_crash_loop: a failure this soon after a task's start counts towards its crash "
                     "loop."))
    rules: list[FailureRule] = Field(default=[],
        description=("What to do on failures that look a certain way, checked in order before the built-in "
                     "rules and the default policy."))

    @model_validator(mode="after")
    def _fields_agree(self) -> RestartSpec:
        if self.backoff_max_s < self.backoff_s:
            raise FieldProblems([("backoff_max_s", f"must be at least backoff_s ({self.backoff_s})")])
        if DO_NOT_RESTART_EXIT_CODE in self.preemption_exit_codes:
            raise FieldProblems([("preemption_exit_codes", f"must not hold "
                                  f"{DO_NOT_RESTART_EXIT_CODE}, the exit code with which a task "
                                  "asks not to be restarted")])
        return self


class HealthSpec(BaseModel):
    """Deadlines after which a task counts as failed to start, hung, or slow to stop."""

    model_config = _FROZEN

    startup_timeout_s: Seconds | None = Field(default=300.0,
        description=("No training step this long after a task started: stuck. Enforced when set in the spec, "
                     "or (the default) once an earlier attempt of the job reported steps; null: never."))
    hang_timeout_s: Seconds | None = Field(default=120.0,
        description="A task that reported steps but no new one for this long is hung; null turns it off.")
    grace_period_s: Seconds = Field(default=10.0,
        description=("TERM -> KILL delay when tfcluster stops tasks that may still save (Ctrl-C, "
                     "preemption)."))
    failure_grace_period_s: Seconds = Field(default=0.5,
        description=("TERM -> KILL delay for the survivors of a failed task: under MWMS they are stuck in a "
                     "collective with a dead peer, cannot save anything, and often ignore TERM (measured on "
                     "the digits example: the survivor outlived TERM by the whole 2 s the default used to "
                     "be)."))
    heartbeat_interval_s: Annotated[Seconds, AfterValidator(check_heartbeat_interval)] = Field(default=1.0,
        description=("How often each agent sends a heartbeat (liveness, CPU, RSS) and the coordinator pings "
                     "each agent."))
    heartbeat_timeout_s: Seconds = Field(default=15.0,
        description="An agent that sends nothing (not even a heartbeat) this long is a lost host.")
    straggler_ratio: Annotated[float, Field(strict=False, gt=0, lt=1, allow_inf_nan=False)] = Field(
        default=0.5,
        description=("A task whose steps/s stay below this fraction of the others' median for "
                     "`straggler_window_s` is flagged as a straggler (event `task_straggling`)."))
    straggler_window_s: Seconds = Field(default=30.0,
        description="How long a task must stay below straggler_ratio before it is named a straggler.")
    memory_warn_ratio: Annotated[float, Field(strict=False, gt=0, le=1, allow_inf_nan=False)] = Field(
        default=0.9,
        description=("Warn (event `task_memory_high`) when a task's RSS passes this fraction of its memory "
                     "limit: `memory_limit_mib`, or by default its RSS plus what its host still has "
                     "available."))
    memory_limit_mib: Annotated[int, Field(strict=True, ge=1)] | None = Field(default=None,
        description=("A task whose RSS passes this many MiB is killed and reported as out of memory; null: "
                     "no limit of tfcluster's own."))

    @model_validator(mode="after")
    def _heartbeat_order(self) -> HealthSpec:
        if self.heartbeat_timeout_s <= self.heartbeat_interval_s:
            raise FieldProblems([("heartbeat_timeout_s",
                              f"must be longer than heartbeat_interval_s "
                              f"({self.heartbeat_interval_s})")])
        return self
