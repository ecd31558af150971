"""What a run records: its directory and layout, the events (types and log), the stored spec, task
failures, the attempts' outcomes and ``summary.json``. Below the job loop and the output that write
and read them."""

# The events of pools and of single-task restarts register themselves with the package, so that
# every reader of events.jsonl knows them (defining an event class registers it).
from launcher.run import pool_events as _pool_events  # noqa: F401
from launcher.run import task_events as _task_events  # noqa: F401
