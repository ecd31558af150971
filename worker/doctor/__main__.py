"""``python -m worker.doctor``: the program ``tfcluster doctor`` starts on every host. Its answers go
to its original stdout; fd 1 is pointed at stderr, so a stray print cannot corrupt them."""

import os
import sys

from worker.doctor.program import run

answers_fd = os.dup(1)
os.dup2(2, 1)
with os.fdopen(0, "rb") as commands, os.fdopen(answers_fd, "wb") as answers:
    code = run(commands, answers)
sys.exit(code)
