"""``tfcluster``'s entry point: parse, run the verb, and turn any tfcluster error into its one-line
message and exit code (the only place errors are caught for the user: none shows a traceback)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

from launcher.errors import TfclusterError, UsageError


def main(argv: Sequence[str] | None = None) -> int:
    try:  # Ctrl-C while the parser is built or a verb imported is caught like any other
        from launcher.cli import parser

        args = parser.build_parser().parse_args(argv)
        from launcher.cli.verbs import COMMANDS

        return COMMANDS[args.verb](args)
    except KeyboardInterrupt:  # Ctrl-C before the job's own handler was installed: any task
        print("tfcluster: interrupted", file=sys.stderr)  # started early has been stopped
        return 128 + signal.SIGINT
    except BrokenPipeError:  # ``tfcluster plan | head -1``: the reader has what it wanted,
        _silence_stdout()    # which is no error (exit 0, no message), whatever the verb
        return 0
    except TfclusterError as exc:
        # bad input names its source itself (``spec.yaml: tasks[1].port: ...``)
        print(exc if isinstance(exc, UsageError) else f"tfcluster: {exc}", file=sys.stderr)
        return exc.exit_code


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def entry() -> None:
    code = main()
    try:  # what is still buffered goes out here: the reader may have gone meanwhile
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    from worker.wire.quick_exit import exit_now

    exit_now(code)  # sys.exit without the teardown of every module (10-20 ms after each run)
