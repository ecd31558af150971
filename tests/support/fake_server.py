"""A stand-in for ``python -m worker.server`` that imports no TensorFlow (tests): it listens on
its TF_CONFIG address as a TF server would, reports nothing, and exits 0 on SIGTERM. On request
it closes its listener while it stays alive (a server whose port went dead), or exits with a code
after a while (a crash loop), optionally only on its first N starts (counted in a file); or,
started again, takes a while to listen (as a TF server importing TensorFlow does)."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from worker.wire.tfconfig import TFConfig


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--close-after", type=float, default=None)
    parser.add_argument("--exit-after", type=float, default=None)
    parser.add_argument("--exit-code", type=int, default=1)
    parser.add_argument("--only-task", default=None, help="misbehave only as this task")
    parser.add_argument("--starts-file", default=None, help="misbehave only on the first starts")
    parser.add_argument("--bad-starts", type=int, default=1_000_000)
    parser.add_argument("--listen-after-restart", type=float, default=0.0, metavar="SECONDS",
                        help="started again (counted in --starts-file), listen only after this")
    args = parser.parse_args()
    config = TFConfig.from_json(os.environ["TF_CONFIG"])
    me = str(config.task)
    bad = args.only_task in (None, me)
    starts = 1
    if args.starts_file is not None:
        counter = Path(f"{args.starts_file}.{config.task.file_stem}")
        starts = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(starts))
        bad = bad and starts <= args.bad_starts
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if starts > 1 and stop.wait(args.listen_after_restart):
        return 0
    port = int(config.address(config.task).rsplit(":", 1)[1])
    listener = socket.create_server(("", port), reuse_port=False)
    print(f"{me} serving on port {port}", file=sys.stderr, flush=True)
    if bad and args.exit_after is not None and stop.wait(args.exit_after) is False:
        print(f"{me}: failing on purpose", file=sys.stderr, flush=True)
        return int(args.exit_code)
    if bad and args.close_after is not None and not stop.wait(args.close_after):
        listener.close()
        print(f"{me}: port closed, still running", file=sys.stderr, flush=True)
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
