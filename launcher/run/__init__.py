"""What a run records: its directory and layout, the events (types and log), the stored spec, task
failures, the attempts' outcomes and ``summary.json``. Below the job loop and the output that write
and read them."""

# The pool's events register themselves with the package, so that every reader of events.jsonl
# knows them (defining an event class registers it).
from launcher.run import pool_events as _pool_events  # noqa: F401
