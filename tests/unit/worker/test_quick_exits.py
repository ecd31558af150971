"""The end of a run without waits that need not be: the agent's "no child, no /proc scan"
(``process_tree.has_children``), the coordinator's wait for an agent woken by its exit
(``launcher.backends.process_exit``), and ``worker.wire.quick_exit.exit_now``, which skips the
interpreter's teardown but nothing a process relies on (atexit functions, buffered output, a
thread that is not a daemon)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from launcher.backends.process_exit import wait_exit

TIMEOUT_S = 30.0


def _python(code: str, stdin: int | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc: subprocess.Popen[bytes]) -> tuple[str, str]:
    """What ``proc`` wrote, once it exited (killed if it does not within TIMEOUT_S)."""
    try:
        proc.wait(TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stdout is not None and proc.stderr is not None
    return proc.stdout.read().decode(), proc.stderr.read().decode()


def test_has_children_says_whether_a_child_is_left_running_or_unreaped() -> None:
    proc = _python("""
        import subprocess, sys
        from worker.agent import process_tree
        print(process_tree.has_children(), process_tree.own_descendants())
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                 stdin=subprocess.PIPE)
        print(process_tree.has_children(), [s.pid for s in process_tree.own_descendants()]
              == [child.pid])
        child.stdin.close()
        child.wait()
        print(process_tree.has_children(), process_tree.own_descendants())
    """)
    out, err = _finish(proc)
    assert proc.returncode == 0, err
    assert out.split("\n")[:3] == ["False []", "True True", "False []"]


def test_wait_exit_returns_the_exit_code_once_the_process_ends_and_none_before() -> None:
    proc = _python("import sys; sys.stdin.read(); sys.exit(5)", stdin=subprocess.PIPE)
    try:
        assert wait_exit(proc, 0.05) is None  # still reading its stdin
        assert proc.stdin is not None
        proc.stdin.close()
        started = time.monotonic()
        assert wait_exit(proc, TIMEOUT_S) == 5
        assert time.monotonic() - started < TIMEOUT_S / 2
        assert proc.returncode == 5  # reaped: no zombie left
        assert wait_exit(proc, 0.0) == 5  # and again, at once
    finally:
        _finish(proc)


def test_exit_now_runs_atexit_functions_flushes_output_and_keeps_the_exit_code() -> None:
    proc = _python("""
        import atexit, sys
        from worker.wire.quick_exit import exit_now
        atexit.register(lambda: print("atexit ran"))
        sys.stdout.write("buffered, ")
        exit_now(3)
    """)
    out, err = _finish(proc)
    assert (proc.returncode, out, err) == (3, "buffered, atexit ran\n", "")


def test_exit_now_waits_for_a_thread_that_is_not_a_daemon() -> None:
    """The thread is still blocked when exit_now is called (it waits for this test's line, sent
    only after the process said it is exiting): its output must still come."""
    proc = _python("""
        import sys, threading
        from worker.wire.quick_exit import exit_now
        worker = threading.Thread(target=lambda: print("thread got", sys.stdin.readline().strip(),
                                                       flush=True))
        worker.start()
        print("exiting", flush=True)
        exit_now(4)
    """, stdin=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert proc.stdout.readline() == b"exiting\n"
        proc.stdin.write(b"go\n")
        proc.stdin.close()
    finally:
        out, err = _finish(proc)
    assert (proc.returncode, out) == (4, "thread got go\n"), err
