"""Where the agent may not read the kernel's log (a container, a user without the right), a task's
SIGKILL is called an OOM kill when the kernel's count of OOM kills (``/proc/vmstat``) went up since
the task was last sampled; where it may, that count is never read (the log names the victim)."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.agent.oom_evidence import KernelLog, OomWatch, host_oom_kills

VMSTAT = b"nr_free_pages 1\nnuma_hit 2\noom_kill 7\nnr_foll_pin_acquired 0\n"


def killed_by_oom(watch: OomWatch, pid: int) -> bool | None:
    evidence = watch.evidence(pid, killed=True)
    assert evidence is not None
    return evidence.oom_killed


@pytest.mark.parametrize(("content", "count"), [
    (VMSTAT, 7),
    (b"oom_kill_extra 3\nnr_free_pages 1\n", None),  # no such line
    (b"nr_free_pages 1\noom_kill x\n", None),  # not a number
])
def test_the_hosts_oom_kill_count(tmp_path: Path, content: bytes, count: int | None) -> None:
    (tmp_path / "vmstat").write_bytes(content)
    assert host_oom_kills(tmp_path) == count
    assert host_oom_kills(tmp_path / "missing") is None


def test_the_real_count_is_read() -> None:
    assert isinstance(host_oom_kills(), int)


def test_without_the_kernels_log_a_sigkill_after_the_count_rose_is_an_oom_kill(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counts = iter([3, 3, 4])
    monkeypatch.setattr("worker.agent.oom_evidence.host_oom_kills", lambda: next(counts))
    watch = OomWatch(KernelLog(str(tmp_path / "no-kmsg")))
    assert not watch.log.readable
    watch.sample([101, 102])  # count 3
    assert killed_by_oom(watch, 101) is False  # count 3 again
    assert killed_by_oom(watch, 102) is True  # count 4


def test_with_the_kernels_log_the_count_is_never_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unread() -> int:
        raise AssertionError("/proc/vmstat read although the kernel's log says who was killed")

    monkeypatch.setattr("worker.agent.oom_evidence.host_oom_kills", unread)
    log = tmp_path / "kmsg"
    log.write_bytes(b"")
    watch = OomWatch(KernelLog(str(log)))
    assert watch.log.readable
    watch.sample([101])
    assert killed_by_oom(watch, 101) is False  # the log names no such victim
