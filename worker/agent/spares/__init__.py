"""Warm spares, the agent's side: :mod:`~worker.agent.spares.pool` keeps one pre-started
interpreter per task (each a :mod:`~worker.agent.spares.process`, running
:mod:`worker.runtime.spare`), :mod:`~worker.agent.spares.warm_starts` decides when to fill it and
starts tasks from it, and :mod:`~worker.agent.spares.import_env` says which launches a spare fits.
"""
