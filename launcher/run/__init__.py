"""What a run records: its directory and layout, the events (types and log), the stored spec, task
failures, the attempts' outcomes and ``summary.json``. Below the job loop and the output that write
and read them.

Importing the package imports none of its modules: a new run's directory is made before its first
launch, and the event types (:mod:`launcher.run.events`, which registers every one of them) are
not needed until the job loop records them."""
