"""Before a run: check every host at once, where its agent would run, and report per host.

Engine-neutral: the one probe (:mod:`.probe`), how its answer reads (:mod:`.answer`), the report
(:mod:`.report`) and how it is shown (:mod:`.view`), and every host at once (:mod:`.group`). An
engine provides only a :class:`~launcher.preflight.runner.ProbeRunner`: how a command runs on one
of its hosts and how the chief's checkpoint dir is checked there."""
