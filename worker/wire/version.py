"""tfcluster's version and the agent protocol's, which the coordinator and every agent compare
before anything starts: another tfcluster on a host is refused with one line, never a protocol
error halfway through a run."""

#: The release (pyproject.toml reads it from here).
TFCLUSTER_VERSION = "0.1.0"
#: The agent protocol's version: raised whenever a message changes incompatibly.
PROTOCOL_VERSION = 5  # 2: start_task / stop_task; 3: progress dropped_metrics, launch process_mark;
#                       4: stop_at and the control pipe; 5: stacks_dumped
