"""``tfcluster doctor`` across network-namespace hosts over SSH: the one host whose link is
rate-limited (``tc ... tbf``) is named, with a throughput close to the limit, its link the slowest;
a host cut off is reported in one line while the others are still measured; nothing is left
running on any host."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.netns.cluster import NetnsCluster, NetnsHost, NetnsHostsFactory
from tests.support.jobs import FAKE_TRAINER, REPO

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180)]

#: The rate-limited link's rate, Mbit/s.
LIMIT_MBIT = 20


@contextlib.contextmanager
def rate_limited(host: NetnsHost, mbit: int) -> Iterator[None]:
    """Everything sent to ``host`` (its veth's end on the bridge) shaped to ``mbit`` Mbit/s by a
    token bucket; removed again whatever happens."""
    tc = shutil.which("tc") or "/usr/sbin/tc"
    subprocess.run([tc, "qdisc", "add", "dev", host.veth, "root", "tbf", "rate", f"{mbit}mbit",
                    "burst", "32kbit", "latency", "50ms"], check=True, capture_output=True,
                   timeout=10)
    try:
        yield
    finally:
        subprocess.run([tc, "qdisc", "del", "dev", host.veth, "root"], check=False,
                       capture_output=True, timeout=10)


def doctor(spec: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "launcher", "doctor", *args, str(spec)],
                            capture_output=True, text=True, cwd=REPO, timeout=90, check=False,
                            env={**os.environ, "NO_COLOR": "1"})
    return result, time.monotonic() - started


def write_spec(cluster: NetnsCluster, tmp_path: Path) -> Path:
    return cluster.write_spec(tmp_path / "spec.yaml", name="doctor",
                              entrypoint={"script": str(FAKE_TRAINER)},
                              checkpoint_dir=tmp_path / "ckpt")


def assert_nothing_left(cluster: NetnsCluster) -> None:
    for host in cluster:
        assert host.wait_no_processes(10) == [], host.name


def test_the_rate_limited_hosts_link_is_named_the_slowest_with_its_throughput(
        netns_hosts: NetnsHostsFactory, tmp_path: Path) -> None:
    cluster = netns_hosts(3)
    spec = write_spec(cluster, tmp_path)
    with rate_limited(cluster["h2"], LIMIT_MBIT):
        result, took = doctor(spec, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert took < 30
    data = json.loads(result.stdout)
    found = {f["kind"]: f for f in data["findings"]}
    assert found["slowest_host"]["subject"] == "h2"
    slowest = found["slowest_link"]
    assert "h2" in slowest["subject"].split(" <-> ")
    assert 0.7 * LIMIT_MBIT <= slowest["value"] <= 1.05 * LIMIT_MBIT, slowest
    links = {(link["a"], link["b"]): link for link in data["links"]}
    assert set(links) == {("h1", "h2"), ("h1", "h3"), ("h2", "h3")}
    # into h2 is shaped; out of it, and between h1 and h3, is not
    assert links[("h1", "h2")]["a_to_b"]["mbit_s"] <= 1.05 * LIMIT_MBIT
    assert links[("h1", "h2")]["b_to_a"]["mbit_s"] > 5 * LIMIT_MBIT
    assert links[("h1", "h3")]["mbit_s"] > 5 * LIMIT_MBIT
    assert all(0 < link["rtt_ms"] < 50 for link in data["links"])
    hosts = {h["host"]: h for h in data["hosts"]}
    assert hosts["h2"]["address"] == cluster["h2"].address  # where its tasks' peers reach it
    assert all(h["cpus"] >= 1 and h["memory_available_bytes"] > 0 for h in hosts.values())
    assert all(abs(h["clock_offset_ms"]) < 1000 for h in hosts.values())
    (storage,) = data["storage"]  # the chief's host, h1, writes the checkpoints
    assert storage["host"] == "h1" and storage["write_mb_s"] > 0 and storage["read_mb_s"] > 0
    assert not (tmp_path / "ckpt").exists()  # created for the test and removed again
    assert_nothing_left(cluster)


def test_a_host_cut_off_is_one_line_and_exit_1_while_the_others_are_measured(
        netns_hosts: NetnsHostsFactory, tmp_path: Path) -> None:
    cluster = netns_hosts(3)
    spec = write_spec(cluster, tmp_path)
    cluster["h3"].link_down()
    try:
        result, took = doctor(spec, "--connect-timeout", "3")
    finally:
        cluster["h3"].link_up()
    assert result.returncode == 1, result.stdout + result.stderr
    assert took < 30
    lines = result.stdout.splitlines()
    assert "Traceback" not in result.stdout + result.stderr
    cut_off = [line for line in lines if line.startswith("h3: ")]
    assert cut_off[0] == f"h3: unreachable: {cluster['h3'].address}:22: timed out after 3.0s"
    assert any(line.startswith("h1 <-> h2 ") and "bit/s" in line for line in lines)
    assert lines[-1].startswith("doctor: 1 of 3 host(s) could not be measured (h3) in ")
    assert_nothing_left(cluster)
