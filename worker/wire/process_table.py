"""The record of every process an agent owns, kept in a file, and killing what a dead agent left.

An agent killed with SIGKILL cannot clean up: its tasks die with it (``PR_SET_PDEATHSIG``), but their
children and grandchildren are re-parented to init and live on. So an agent keeps, in the file the
coordinator names (``Launch.process_table``), each of its descendants' identity (pid and start time,
see :mod:`worker.wire.process_identity`) and session id, rewritten atomically (temporary file and
rename) after each task starts and every heartbeat interval, and removed when the agent exits
cleanly. Once that agent is dead, :func:`kill_recorded` (called by the coordinator, or by the next
agent given the same file) kills:

1. every recorded process that is still the very same process;
2. every live descendant of a process killed here;
3. every live process in session S, when a recorded process that is still alive is still in
   session S, the session it was recorded in.

Each is stopped (SIGSTOP) as soon as it is found, so that none can fork while the search goes on,
and all are SIGKILLed at the end.

**Why no stranger is ever hit.** (1) A pid and a start time name one process for the life of a boot
(the file records the boot), and each process is pinned by a pidfd before it is signalled. (2) A
descendant is taken only if its parent is held and still alive *after* the child's stat was read:
while the parent lives, its pid names it alone, so this is its child. (3) The kernel does not give
pid S to a new process while any process still has session id S. A recorded process A that is
alive and in session S now was in S when recorded, and has been throughout: a process leaves its
session only through ``setsid``, after which its session id is its own pid, never S again (and if A
is S's leader, A's own life holds pid S). So session S has existed without a break since the
record, and is the very session the agent saw among its descendants: created by a job process,
and every member of a session is forked from its members. The weaker rule "session id S and
created after the task started" would not do: once the task's session empties and its pid is
free, a stranger may get pid S and call ``setsid``, and all of that session is younger than the
task.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from worker.wire.process_identity import PinnedProcess, ProcStat, boot_id, snapshot

FORMAT_VERSION = 1
#: How long :func:`kill_recorded` waits for the processes it killed to be gone.
KILL_WAIT_S = 5.0
#: An upper bound on the search for relatives (it ends sooner: every process found is stopped).
SEARCH_TIMEOUT_S = 5.0
_POLL_S = 0.01


class ProcessTableError(Exception):
    """A process table that cannot be read; the message names the file and why."""


@dataclass(frozen=True)
class Recorded:
    pid: int
    start_ticks: int
    sid: int


def write_table(path: str | os.PathLike[str], processes: list[ProcStat]) -> None:
    """Replace the table at ``path`` by ``processes`` (zombies left out), atomically."""
    target = Path(path)
    records = [Recorded(p.pid, p.start_ticks, p.sid) for p in processes if not p.zombie]
    data = {"version": FORMAT_VERSION, "boot_id": boot_id(),
            "processes": [asdict(r) for r in records]}
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data, separators=(",", ":")))
    os.replace(temporary, target)


def read_table(path: str | os.PathLike[str]) -> list[Recorded]:
    """The processes recorded at ``path``: none if there is no file or it was written before the
    last boot; ProcessTableError if it cannot be read or is not a process table."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise ProcessTableError(f"cannot read the process table {path}: {exc}") from exc
    try:
        data = json.loads(text)
        if data["version"] != FORMAT_VERSION:
            raise ValueError(f"format version {data['version']!r}, expected {FORMAT_VERSION}")
        records = [Recorded(int(r["pid"]), int(r["start_ticks"]), int(r["sid"]))
                   for r in data["processes"]]
        same_boot = data["boot_id"] == boot_id()
    except (ValueError, KeyError, TypeError) as exc:
        raise ProcessTableError(f"{path} is not a process table: {exc!r}") from exc
    return records if same_boot else []


def remove_table(path: str | os.PathLike[str]) -> None:
    """Delete the table at ``path``; a missing one is not an error."""
    Path(path).unlink(missing_ok=True)


def kill_recorded(path: str | os.PathLike[str]) -> list[int]:
    """SIGKILL what the table at ``path`` names (see the module doc for what and why it is safe),
    wait up to :data:`KILL_WAIT_S` for it to be gone, and return the pids killed. Nothing if there
    is no table; ProcessTableError if it cannot be read."""
    recorded = read_table(path)
    held: dict[int, PinnedProcess] = {}
    try:
        for record in recorded:
            pinned = PinnedProcess.pin(record.pid, record.start_ticks)
            if pinned is not None:
                _hold(held, pinned)
        anchors: dict[int, list[PinnedProcess]] = {}
        for record in recorded:
            if record.pid in held:
                anchors.setdefault(record.sid, []).append(held[record.pid])
        deadline = time.monotonic() + SEARCH_TIMEOUT_S
        while _hold_relatives(held, anchors) and time.monotonic() < deadline:
            pass
        for pinned in held.values():
            pinned.signal(signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while any(p.alive() for p in held.values()) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        return sorted(held)
    finally:
        for pinned in held.values():
            pinned.close()


def _hold(held: dict[int, PinnedProcess], pinned: PinnedProcess) -> None:
    pinned.signal(signal.SIGSTOP)
    held[pinned.pid] = pinned


def _hold_relatives(held: dict[int, PinnedProcess],
                    anchors: dict[int, list[PinnedProcess]]) -> bool:
    """Hold every process that is now a child of a held one, or in an anchored session; True if
    any was found."""
    found = False
    for stat in snapshot().values():
        if stat.pid in held or stat.pid == os.getpid() or stat.zombie:
            continue
        if stat.ppid not in held and stat.sid not in anchors:
            continue
        pinned = PinnedProcess.pin(stat.pid, stat.start_ticks)
        if pinned is None:
            continue
        now = pinned.current()  # read first; the relation is checked to hold after this read
        if now is not None and (_child_of_held(held, now) or _in_anchored_session(anchors, now)):
            _hold(held, pinned)
            found = True
        else:
            pinned.close()
    return found


def _child_of_held(held: dict[int, PinnedProcess], stat: ProcStat) -> bool:
    parent = held.get(stat.ppid)
    return parent is not None and parent.alive()


def _in_anchored_session(anchors: dict[int, list[PinnedProcess]], stat: ProcStat) -> bool:
    for anchor in anchors.get(stat.sid, []):
        now = anchor.current()
        if now is not None and now.sid == stat.sid:
            return True
    return False


class TableKeeper:
    """An agent's own process table: cleared of a dead predecessor's leftovers when the agent
    starts, rewritten as its processes change, removed when it exits cleanly. Problems are told
    once, through ``say`` (the agent turns them into AgentError messages), never raised."""

    def __init__(self, path: str, say: Callable[[str], None],
                 note: Callable[[str], None]) -> None:
        self.path = path
        self._say = say
        self._note = note
        self._failed = False

    def clear_leftovers(self) -> None:
        """Kill what a dead agent recorded here, before this one starts anything."""
        try:
            killed = kill_recorded(self.path)
        except ProcessTableError as exc:
            self._say(f"{exc}; overwriting it")
            return
        if killed:
            self._note(f"killed {len(killed)} processes that a previous agent left behind "
                       f"(recorded in {self.path}): {killed}")

    def record(self, processes: list[ProcStat]) -> None:
        try:
            write_table(self.path, processes)
        except OSError as exc:
            if not self._failed:
                self._failed = True
                self._say(f"cannot write the process table: {exc}")

    def remove(self) -> None:
        try:
            remove_table(self.path)
        except OSError as exc:
            self._note(f"cannot remove {self.path}: {exc}")
