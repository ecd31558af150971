"""The record of every process an agent owns, kept in a file, and killing what a dead agent left.

An agent killed with SIGKILL cannot clean up: its tasks die with it (``PR_SET_PDEATHSIG``), but their
children and grandchildren are re-parented to init and live on. So an agent keeps, in the file the
coordinator names (``Launch.process_table``), each of its descendants' identity (pid and start time,
see :mod:`worker.wire.process_identity`) and session id, rewritten atomically (temporary file and
rename) after each task starts and every heartbeat interval, and removed when the agent exits
cleanly. Once that agent is dead, :func:`kill_recorded` (called by the coordinator, or by the next
agent given the same file) kills:

1. every recorded process that is still the very same process *and* carries the job's mark
   (:mod:`worker.wire.process_mark`);
2. every live process of this user that carries the job's mark, recorded or not: so what a task
   started since the table was last written (a fork a moment before its agent was killed) is
   found all the same;
3. every live descendant of a process killed here;
4. every live process in session S, when a recorded process held by rule 1 is still alive and
   still in session S, the session it was recorded in.

The file lies in the run directory, which a task can write (it knows ``TFCLUSTER_RUN_DIR``), and
so may others: a record is a hint, never a proof. A record that does not prove itself (the process
it names is alive but does not carry the mark) is left alone and counted (:class:`Cleared`).

Each is stopped (SIGSTOP) as soon as it is found, so that none can fork while the search goes on,
and all are SIGKILLed at the end.

**Why no stranger is ever hit.** (1, 2) A pid and a start time name one process for the life of a
boot (the file records the boot), each process is pinned by a pidfd before its environment is
read, and it is held only if it is still alive after the read: the mark it carries is its own,
and only the job puts it there (:mod:`worker.wire.process_mark`). (3) A
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
task. Only a process that proved itself anchors a session: a record's session id is no proof.
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
from worker.wire.process_mark import carries, marked
from worker.wire.safe_open import read_text, replace_file

FORMAT_VERSION = 1
#: How long :func:`kill_recorded` waits for the processes it killed to be gone.
KILL_WAIT_S = 5.0
#: An upper bound on the search for relatives (it ends sooner: every process found is stopped).
SEARCH_TIMEOUT_S = 5.0
_POLL_S = 0.01
#: Most bytes of a process table that are read (a record is about 50 bytes).
MAX_TABLE_BYTES = 16 * 1024 * 1024


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
    # not synced: written every heartbeat, and a table from before a reboot is ignored anyway
    replace_file(target, json.dumps(data, separators=(",", ":")).encode(), 0o600, sync=False)


def read_table(path: str | os.PathLike[str]) -> list[Recorded]:
    """The processes recorded at ``path``: none if there is no file or it was written before the
    last boot; ProcessTableError if it cannot be read or is not a process table."""
    try:
        text = read_text(path, MAX_TABLE_BYTES)  # not through a symlink, never a FIFO
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
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
        raise ProcessTableError(f"{path} is not a process table: {exc!r}") from exc
    return records if same_boot else []


def remove_table(path: str | os.PathLike[str]) -> None:
    """Delete the table at ``path``; a missing one is not an error."""
    Path(path).unlink(missing_ok=True)


@dataclass(frozen=True)
class Cleared:
    """What :func:`kill_recorded` did: the pids it killed; how many live processes the table named
    that did not prove to be the job's (left alone); why the table could not be read, if it
    could not (the marked processes were killed all the same)."""

    killed: list[int]
    unproven: int = 0
    problem: str | None = None


def kill_recorded(path: str | os.PathLike[str], mark: str | None) -> Cleared:
    """SIGKILL the processes of the job whose processes carry ``mark`` that the table at ``path``
    names or that carry the mark (see the module doc for what and why it is safe), and wait up to
    :data:`KILL_WAIT_S` for them to be gone. Without a mark nothing proves itself: nothing is
    killed. Never raises for a missing or bad table."""
    problem = None
    try:
        recorded = read_table(path)
    except ProcessTableError as exc:
        recorded, problem = [], str(exc)
    held: dict[int, PinnedProcess] = {}
    unproven = 0
    try:
        for record in recorded:
            pinned = PinnedProcess.pin(record.pid, record.start_ticks)
            if pinned is None or pinned.pid in held:
                pass
            elif mark is not None and _proves(pinned, mark):
                _hold(held, pinned)
                continue
            else:
                unproven += 1
            if pinned is not None:
                pinned.close()
        anchors: dict[int, list[PinnedProcess]] = {}
        for record in recorded:
            if record.pid in held:
                anchors.setdefault(record.sid, []).append(held[record.pid])
        deadline = time.monotonic() + SEARCH_TIMEOUT_S
        while (_hold_marked(held, mark) | _hold_relatives(held, anchors)) \
                and time.monotonic() < deadline:
            pass
        for pinned in held.values():
            pinned.signal(signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while any(p.alive() for p in held.values()) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        return Cleared(sorted(held), unproven, problem)
    finally:
        for pinned in held.values():
            pinned.close()


def _proves(pinned: PinnedProcess, mark: str) -> bool:
    """The pinned process carries ``mark``, read while it was that very process."""
    return carries(pinned.pid, mark) and pinned.alive()


def _hold_marked(held: dict[int, PinnedProcess], mark: str | None) -> bool:
    """Hold every live process that carries ``mark``; True if any was found."""
    if mark is None:
        return False
    found = False
    for stat in marked(mark):
        if stat.pid in held:
            continue
        pinned = PinnedProcess.pin(stat.pid, stat.start_ticks)
        if pinned is not None and _proves(pinned, mark):
            _hold(held, pinned)
            found = True
        elif pinned is not None:
            pinned.close()
    return found


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

    def __init__(self, path: str, mark: str | None, say: Callable[[str], None],
                 note: Callable[[str], None]) -> None:
        self.path = path
        self.mark = mark
        self._say = say
        self._note = note
        self._failed = False

    def clear_leftovers(self) -> None:
        """Kill what a dead agent of this job left (recorded here, or carrying the job's mark),
        before this one starts anything."""
        cleared = kill_recorded(self.path, self.mark)
        if cleared.problem is not None:
            self._say(f"{cleared.problem}; overwriting it")
        if cleared.unproven:
            self._note(f"left alone {cleared.unproven} live processes listed in {self.path} that "
                       "do not carry this run's mark (not started by this job)")
        if cleared.killed:
            self._note(f"killed {len(cleared.killed)} processes that a previous agent left "
                       f"behind: {cleared.killed}")

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
