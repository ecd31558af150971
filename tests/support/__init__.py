"""What the tests share: jobs and processes, the fake engine and trainer, planners, files."""
