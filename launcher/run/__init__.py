"""What a run records: its directory and layout, the events (types and log), the stored spec, task
failures, the attempts' outcomes and ``summary.json``. Below the job loop and the output that write
and read them."""
