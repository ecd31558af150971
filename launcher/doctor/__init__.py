"""``tfcluster doctor SPEC``: the hosts of a spec measured as one job would use them, before a long
run. Through the engine's :class:`~launcher.preflight.runner.ProbeRunner` (the SSH connection and
verified host key, the spec's python and workdir, or a job step), every host runs tfcluster's own
measuring program (:mod:`worker.doctor`, no TensorFlow): the links between hosts at their tasks'
addresses (round trip, throughput each way), each host's free memory, CPUs and clock, and the
checkpoint directory's write and read speed from the hosts that read it.

:mod:`.targets` (which hosts, at which address), :mod:`.host` (one host's program),
:mod:`.schedule` (which links at once), :mod:`.run` (the whole run), :mod:`.report` (what was
measured), :mod:`.clock` (offset arithmetic), :mod:`.findings` (the slowest link and host against
the median), :mod:`.view` (tables and ``--json``), :mod:`.units` (how figures are written)."""
