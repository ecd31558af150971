"""Names inside a run directory that more than one layer needs (the planner names the agents'
process tables, the run directory their logs). Imports nothing of launcher."""

from __future__ import annotations

#: Per host, under the run directory: the agent's log and (for a local agent) its process table.
AGENTS_DIR = "agents"
#: An agent's process table: ``<host><PROCESS_TABLE_SUFFIX>`` (see worker.wire.process_table).
PROCESS_TABLE_SUFFIX = ".processes.json"
#: Where a remote agent keeps its process table, on its host (``~``: the login's home).
REMOTE_AGENTS_DIR = "~/.cache/tfcluster/agents"
