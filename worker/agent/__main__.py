"""``python -m worker.agent``: how every engine starts a host's agent. Protocol messages go to
the agent's original stdout; fd 1 is pointed at stderr, so a stray print cannot corrupt them."""

import os
import sys

from worker.agent.loop import Agent

events_fd = os.dup(1)
os.dup2(2, 1)
sys.exit(Agent(commands_fd=0, events_fd=events_fd).run())
