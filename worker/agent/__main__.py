"""``python -m worker.agent``: how every engine starts a host's agent."""

from worker.agent.loop import main

main()
