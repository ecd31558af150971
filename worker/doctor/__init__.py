"""The program ``tfcluster doctor`` runs on each host of a spec (``python -m worker.doctor``), where
that host's agent would run: it reports the host's memory, CPUs and clock, serves a port for its
peers, measures the round trip and throughput to a peer's port, and the checkpoint directory's
write and read speed. No TensorFlow: standard library and psutil.

:mod:`worker.wire.doctor` is what it and the coordinator say to each other; :mod:`.program`
answers; the measurements are :mod:`.peer` (network), :mod:`.storage` (disk) and :mod:`.facts`
(host)."""
