"""``python -m worker.agent``: how every engine starts a host's agent. Protocol messages go to
the agent's original stdout; fd 1 is pointed at stderr, so a stray print cannot corrupt them."""

import os

from worker.agent.loop import Agent
from worker.wire.quick_exit import exit_now

events_fd = os.dup(1)
os.dup2(2, 1)
# Not sys.exit: the coordinator waits for this exit at the end of each run, and the teardown of
# every module would add milliseconds to it (worker.wire.quick_exit).
exit_now(Agent(commands_fd=0, events_fd=events_fd).run())
