"""The start of an agent's conversation with the coordinator: its ``hello`` (with its versions),
then the first launch, read before anything starts. A launch from another tfcluster version
(:mod:`worker.wire.handshake`), or a first line that is not a launch, is answered with one
``agent_error`` saying why, and the agent exits having started nothing."""

from __future__ import annotations

import os
import socket
import sys
import time

from worker.agent.command_input import CommandInput, LaunchRefused
from worker.agent.outbox import Outbox
from worker.wire.protocol import AgentError, Hello, Launch, ProtocolError

#: The agent's exit code when its first line was not a launch message.
EXIT_BAD_LAUNCH = 2
#: The agent's exit code when it refused a launch from another tfcluster version.
EXIT_REFUSED = 3


def hello() -> Hello:
    return Hello(pid=os.getpid(), hostname=socket.gethostname(), python=sys.version.split()[0],
                 ts=time.time())


def greet(outbox: Outbox, commands: CommandInput,
          flush_s: float) -> tuple[Launch, list[bytes]] | int:
    """Say hello, then wait for the first launch: (it, the command lines read along with it), or
    the agent's exit code when there is none to run: 0 on EOF before it, :data:`EXIT_REFUSED` or
    :data:`EXIT_BAD_LAUNCH` once an ``agent_error`` said why (flushed within ``flush_s``)."""
    outbox.put(hello())
    outbox.flush(flush_s)
    try:
        first = commands.first_launch()
    except LaunchRefused as exc:
        outbox.put(AgentError(message=str(exc)))
        code = EXIT_REFUSED
    except ProtocolError as exc:
        outbox.put(AgentError(message=f"bad launch message: {exc}"))
        code = EXIT_BAD_LAUNCH
    else:
        return 0 if first is None else first
    outbox.flush(flush_s)
    return code
