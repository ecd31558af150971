"""Before a run: check every host at once and report per host."""
