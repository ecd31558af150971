"""The host agent: ``python -m worker.agent``, one per host for the whole job.

It reads the coordinator's commands on its stdin and answers on its stdout (the protocol of
:mod:`worker.wire.protocol`), starts each task of its host (cold, or from a warm spare:
:mod:`worker.agent.spares`), relays what the tasks write and report, and tears their process trees
down. The event loop is :mod:`worker.agent.loop`; nothing here is imported by a task or by the
coordinator.
"""
