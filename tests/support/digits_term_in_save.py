"""The digits example with a preemption notice delivered inside a checkpoint save, for the test
of notices at every moment (tests/e2e/test_preemption_moments.py): with
``TEST_TERM_IN_SAVE=TASK@ATTEMPT``, task ``TASK`` of attempt ``ATTEMPT`` sends itself SIGTERM
at the start of its first periodic save, so the notice arrives while the save runs."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from worker.checkpointing import TrainingCheckpoint
from worker.examples import digits

_save = TrainingCheckpoint.save
_sent: list[int] = []


def _save_with_a_notice(self: TrainingCheckpoint, step: int) -> Any:
    if not _sent and os.environ.get("TEST_TERM_IN_SAVE") == f"{self.ctx.task}@{self.ctx.attempt}":
        _sent.append(step)
        print(f"[test] SIGTERM to myself in the save at step {step}", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
    return _save(self, step)


TrainingCheckpoint.save = _save_with_a_notice  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(digits.main(sys.argv[1:]))
