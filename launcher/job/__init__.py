"""The job loop: the coordinator, one attempt, its agents and tasks, health, the restart
policy, the failures of an attempt and resuming a run."""
