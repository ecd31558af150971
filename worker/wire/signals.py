"""The signals tfcluster sends a task that mean something to tfcluster's own code in it (the task's
runtime, :mod:`worker.runtime`): whoever sends one and the task agree on it here."""

from __future__ import annotations

import signal

#: The agent's ``dump_stacks``: a Python task writes every thread's stack to its stderr.
STACK_DUMP_SIGNAL = signal.SIGUSR1
#: A drill's ``crash`` fault: a Python task raises ``InjectedCrash`` in its main thread (a
#: ``command:`` task keeps the default action, which terminates it). Not used by TensorFlow,
#: Python or the agent for anything else.
CRASH_SIGNAL = signal.SIGPWR
