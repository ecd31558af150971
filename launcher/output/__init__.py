"""What the job shows: console, live status, task logs, metrics, TensorBoard, and ``tfcluster
status`` / ``logs`` (what the job records is :mod:`launcher.run`)."""
