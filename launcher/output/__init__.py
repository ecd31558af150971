"""What the job leaves behind and shows: console, live status, events, summary, run
directory, task logs."""
