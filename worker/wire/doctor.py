"""What ``tfcluster doctor`` and its program on each host (``python -m worker.doctor``) say to each
other, in JSON lines over the program's stdin and stdout; both ends import this module, so they
cannot disagree about a name.

The program first writes its :data:`HELLO` (its tfcluster version and pid). Then each request is
``{"id": N, "op": OP, ...}`` and its one answer ``{"id": N, "ok": true, ...}`` or
``{"id": N, "ok": false, "error": "..."}``, in order, one request at a time:

- ``facts``: ``memory_available`` / ``memory_total`` (bytes; available is the cgroup's limit when
  that is lower), ``cpus`` (usable: the affinity mask), ``cpu_count``, ``load1``, ``hostname``.
- ``clock``: ``time`` (the host's ``time.time()``).
- ``serve`` ``{address, ports}``: listen for peers at ``address`` on the first of ``ports`` that is
  free (the tasks' own ports, as a job would use them), else on a port the kernel picks; answer
  ``port`` and ``bound`` (the address actually bound).
- ``rtt`` ``{address, port, count, budget_s}``: ``samples_ms``, the round trips of one byte to that
  peer (at most ``count``, for at most ``budget_s``).
- ``stream`` ``{address, port, seconds}``: ``bytes`` sent to that peer for ``seconds`` and
  ``elapsed_s``, from the first byte sent until the peer confirmed it had them all.
- ``storage`` ``{dir, size_bytes, budget_s}``: ``write_bytes``, ``write_s`` (fsync included),
  ``read_bytes``, ``read_s`` (the file's pages dropped first: ``cache_dropped``) of a test file
  in ``dir`` (created for it if missing), removed after.

EOF on stdin ends the program (and the peers' port it serves).
"""

from __future__ import annotations

import enum

#: The program, as ``python -m`` runs it (through :func:`worker.wire.module_start.module_argv`).
DOCTOR_MODULE = "worker.doctor"
#: The ``op`` of the program's first line.
HELLO = "hello"
#: The field of the hello naming the program's tfcluster version.
VERSION_FIELD = "tfcluster_version"


class Op(str, enum.Enum):
    """A request's ``op`` (see the module docstring for its fields and answer)."""

    FACTS = "facts"
    CLOCK = "clock"
    SERVE = "serve"
    RTT = "rtt"
    STREAM = "stream"
    STORAGE = "storage"


#: The program's bound on connecting to a peer and on any one read or write there, seconds: a
#: peer that stops answering ends that request with an error within it.
IO_TIMEOUT_S = 10.0

#: The first byte a peer sends on a connection to another host's port: what it wants of it.
ECHO_MODE = b"E"  # echo every byte back (round trips)
SINK_MODE = b"S"  # read to EOF, then answer how many bytes came as 8 bytes, big-endian
