"""The worker image, built in the background while the rest of the suite runs.

A cold build (a ``debootstrap`` base, the wheels, ``docker build``) takes minutes, nearly all of it
waiting on the network and the disk. When the Docker tests are collected, :func:`start` runs
``python -m tests.docker.prebuild`` at the lowest CPU priority: it builds the image the README's
way into the engine's cache (:func:`tests.docker.readme.build_image`), or finds it there, in a
private dockerd of its own, which it stops when done. The Docker tests run last in their group
(``tests/conftest.py``), and their fixture first waits for :data:`LOCK`, which the build holds
from its start to its end (:func:`wait_for_build`); the image is then in the cache. Should the
build fail or be cut short, the fixture builds the image itself and says why.

The build ends with the process that started it (it watches its parent), with SIGTERM and with
Ctrl-C, stopping its dockerd on the way out; at most one runs at a time (the lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from tests.docker.engine import RUN_ROOT, start_engine
from tests.docker.readme import build_image, cluster_in
from tests.support.jobs import REPO

#: Held by the build from its start to its end.
LOCK = RUN_ROOT / "prebuild.lock"
#: What the last build said: its log (the dockerd's and the README commands' output).
LOG = RUN_ROOT / "prebuild.log"
#: The longest a build may take (a cold one takes a few minutes).
BUILD_TIMEOUT_S = 1500
_READY = b"building\n"
_STARTED: list[subprocess.Popen[bytes]] = []


@contextlib.contextmanager
def _held(blocking: bool) -> Iterator[bool]:
    """:data:`LOCK` held for the block: True if taken, False if another process holds it (only
    when not ``blocking``)."""
    RUN_ROOT.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def start() -> subprocess.Popen[bytes] | None:
    """Start the background build unless one runs already; returns once it holds :data:`LOCK`
    (so that a fixture waiting for it cannot miss it), or None if it did not start one."""
    build = subprocess.Popen([sys.executable, "-m", "tests.docker.prebuild", str(os.getpid())],
                             cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
    assert build.stdout is not None  # PIPE
    said = build.stdout.readline()  # "building", or nothing when it exits at once
    build.stdout.close()
    if said != _READY:
        build.wait(timeout=60)
        return None
    _STARTED.append(build)  # kept: it runs on after this call
    return build


def wait_for_build() -> None:
    """Wait until no background build runs (it ends within :data:`BUILD_TIMEOUT_S`)."""
    with _held(blocking=True):
        pass


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def _watch(parent: int) -> None:
    """SIGTERM to this process once ``parent`` has exited, or after :data:`BUILD_TIMEOUT_S`."""
    with contextlib.suppress(OSError):
        select.select([os.pidfd_open(parent)], [], [], BUILD_TIMEOUT_S)
    os.kill(os.getpid(), signal.SIGTERM)


def main(parent: int) -> int:
    os.nice(19)  # the build takes what CPU the tests leave (its dockerd and steps inherit it)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    with _held(blocking=False) as taken:
        if not taken:
            return 0
        sys.stdout.buffer.write(_READY)
        sys.stdout.flush()
        threading.Thread(target=_watch, args=(parent,), daemon=True).start()
        with LOG.open("w") as log, tempfile.TemporaryDirectory(prefix="tfc-prebuild-") as tmp:
            try:
                with start_engine(Path(tmp) / "dockerd.log") as engine:
                    started = time.monotonic()
                    built = build_image(cluster_in(engine, Path(tmp)))
                    print(f"{'built' if built else 'found'} in "
                          f"{time.monotonic() - started:.0f}s", file=log)
            except BaseException as exc:
                print(f"the background build failed: {type(exc).__name__}: {exc}", file=log)
                raise
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
