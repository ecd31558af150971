"""The job loop: the coordinator, one attempt, its agents and tasks, health, the restart
policy, failures, checkpoint discovery and drills."""
