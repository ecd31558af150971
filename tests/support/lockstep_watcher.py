"""A lock-step training loop without TensorFlow, for the stop-step protocol over SSH and Slurm:
every step waits at a barrier of all the tasks (the chief, the first task of TF_CONFIG, listens on
its own address; the others connect), as every MWMS step waits in its all-reduce, so no task is
ever more than one step ahead of another. After each step it asks tfcluster's real
``PreemptionWatcher`` whether the job stops there; its strategy stands in for MWMS and fails if
a collective is ever asked of it (under tfcluster the coordinator's step needs none). At the stop
the chief writes a checkpoint of the step (fake_trainer's layout), every task prints
``lockstep TASK: stopped after step N`` and exits 143; a resumed run starts after the checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import worker
from worker.preemption import PreemptionWatcher

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: find tests/
from tests.support.fake_trainer import restore, write_checkpoint

CONNECT_TIMEOUT_S = 30.0


class NoCollectives:
    """Where MWMS would be: any collective asked of it is a failure of the protocol."""

    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the stop step ran a collective")


class Barrier:
    """Every task's ``wait`` returns only once every task has called it, step after step."""

    def __init__(self, addresses: list[str], index: int) -> None:
        self.peers: list[socket.socket] = []
        host, port = addresses[0].rsplit(":", 1)
        if index == 0:
            listener = socket.create_server((host, int(port)))
            while len(self.peers) < len(addresses) - 1:
                self.peers.append(listener.accept()[0])
            listener.close()
        else:
            deadline = time.monotonic() + CONNECT_TIMEOUT_S
            while True:
                try:
                    self.peers.append(socket.create_connection((host, int(port)), timeout=5))
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        self.chief = index == 0
        for peer in self.peers:
            peer.settimeout(None)

    def wait(self) -> None:
        if self.chief:
            for peer in self.peers:
                _read_byte(peer)
            for peer in self.peers:
                peer.sendall(b"g")
        else:
            self.peers[0].sendall(b"s")
            _read_byte(self.peers[0])


def _read_byte(peer: socket.socket) -> None:
    if not peer.recv(1):
        raise SystemExit("a peer left the barrier")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step-time", type=float, default=0.02)
    args = parser.parse_args()
    ctx = worker.context()
    config = json.loads(os.environ["TF_CONFIG"])
    addresses = [a for kind in ("chief", "worker") for a in config["cluster"].get(kind, [])]
    me = config["cluster"][config["task"]["type"]][config["task"]["index"]]
    barrier = Barrier(addresses, addresses.index(me))
    watcher = PreemptionWatcher(NoCollectives())
    watcher.install()
    start = restore(ctx)
    print(f"lockstep {ctx.task}: attempt {ctx.attempt} from step {start}", flush=True)
    for step in range(start + 1, args.steps + 1):
        barrier.wait()
        time.sleep(args.step_time)
        worker.report(step)
        if watcher.should_stop(step):
            if ctx.is_chief and ctx.checkpoint_dir:
                write_checkpoint(ctx.checkpoint_dir, step)
            print(f"lockstep {ctx.task}: stopped after step {step}", flush=True)
            sys.exit(143)
    print(f"lockstep {ctx.task}: done at step {args.steps}", flush=True)


if __name__ == "__main__":
    main()
