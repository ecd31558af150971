"""What the job shows and leaves behind: console, live status, the event log, the run directory,
task logs."""
