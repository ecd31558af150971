"""What a spec's values may be so that every task can really be started from them on Linux.

A string that becomes an argv word, an environment entry or a path must hold no NUL byte (``execve``
ends every string at the first one), must be encodable as UTF-8 (a lone surrogate is not) and must
fit the kernel's limits; numbers are bounded so that no loop over them, timer or exponential backoff
built from them can run away. Each check raises ``ValueError`` with a message for a person, which
:mod:`launcher.spec.translate` turns into a problem naming the field path
(``env.FOO: must not contain a NUL byte``). Checking here means ``tfcluster validate`` catches what
would otherwise fail, or crash, only when a task is spawned.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Annotated

from pydantic import AfterValidator, Field

#: The longest one argv word or one ``NAME=value`` environment entry may be, in bytes of UTF-8
#: (Linux's MAX_ARG_STRLEN, 32 pages of 4 KiB, less the terminating NUL).
MAX_ARG_BYTES = 32 * 4096 - 1
#: The longest a path may be, in bytes of UTF-8 (Linux's PATH_MAX less the terminating NUL).
MAX_PATH_BYTES = 4096 - 1
#: The most bytes of arguments and environment (what the spec gives, and TF_CONFIG) a task may be
#: started with. Linux refuses more than a quarter of the stack limit (2 MiB by default) for both
#: together, and each task also inherits its agent's environment: half of that is left for it.
MAX_EXEC_BYTES = 1024 * 1024
#: What each argv word or env entry costs besides its bytes: its NUL and its pointer.
_EXEC_OVERHEAD_BYTES = 1 + 8
#: The most tasks a job may have. TF_CONFIG lists every task's address in one environment entry
#: (at most :data:`MAX_ARG_BYTES`: about 7000 ``localhost:NNNNN`` addresses), a simulated cluster
#: needs a free port per task from the ~12000 outside the ephemeral range, and no real
#: MultiWorkerMirroredStrategy job comes near it.
MAX_TASKS = 4096
#: Why :data:`MAX_TASKS`, as the problem says it.
TASK_LIMIT_REASON = (f"a job has at most {MAX_TASKS} tasks (TF_CONFIG lists every task in one "
                     "environment variable, and each local task needs a free port)")
#: The longest any duration in a spec may be (timers beyond it overflow, and nothing in a job
#: needs to wait a week).
MAX_SECONDS = 7 * 24 * 3600.0
#: The shortest heartbeat interval: a shorter one has every agent flood the coordinator.
MIN_HEARTBEAT_INTERVAL_S = 0.05
#: The most restarts a job may be allowed: more would make the exponential backoff overflow, and
#: a job that failed a thousand times will not recover by itself.
MAX_RESTARTS = 1000
#: Integers with more digits than this are described, not printed, in a problem.
_SHOWN_DIGITS = 40
#: Strings longer than this are cut when a problem quotes them.
_SHOWN_CHARS = 40
_DIGITS_PER_BIT = 0.30103  # log10(2)

_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be an argv word, env entry or path on any host, or None if it can."""
    if "\0" in value:
        return "must not contain a NUL byte"
    found = _SURROGATE.search(value)
    if found:
        return (f"must be valid Unicode text (it contains the lone surrogate "
                f"U+{ord(found.group()):04X}, which cannot be encoded as UTF-8)")
    return None


def _size_problem(value: str, limit: int, what: str) -> str | None:
    size = len(value.encode("utf-8"))
    if size > limit:
        return f"is {size} bytes long: {what} may be at most {limit} bytes on Linux"
    return None


def check_text(value: str) -> str:
    """``value`` if it can be passed to a program (no NUL, valid Unicode); else ValueError."""
    problem = text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def check_word(value: str) -> str:
    """``value`` if it can be one argv word; else ValueError."""
    problem = text_problem(value) or _size_problem(value, MAX_ARG_BYTES, "one argument")
    if problem:
        raise ValueError(problem)
    return value


def check_path(value: str) -> str:
    """``value`` if it can be a path; else ValueError."""
    problem = text_problem(value) or _size_problem(value, MAX_PATH_BYTES, "a path")
    if problem:
        raise ValueError(problem)
    return value


def env_entry_problem(name: str, value: str) -> str | None:
    """Why ``NAME=value`` cannot be one environment entry (too long), or None if it can."""
    return _size_problem(f"{name}={value}", MAX_ARG_BYTES, "one environment entry (NAME=value)")


def exec_size(words: Iterable[str], env: Mapping[str, str], tf_config_bytes: int) -> int:
    """Bytes of argv and environment a task gets from the spec (the agent's own environment
    aside): each word and ``NAME=value`` with its NUL and pointer, plus TF_CONFIG's entry."""
    entries = [*words, *(f"{name}={value}" for name, value in env.items())]
    return (sum(len(entry.encode("utf-8")) + _EXEC_OVERHEAD_BYTES for entry in entries)
            + tf_config_bytes + _EXEC_OVERHEAD_BYTES)


def exec_size_problem(size: int) -> str | None:
    """Why a task cannot be started with ``size`` bytes of arguments and environment, or None."""
    if size <= MAX_EXEC_BYTES:
        return None
    return (f"the tasks would start with about {size} bytes of arguments and environment, more "
            f"than the {MAX_EXEC_BYTES} tfcluster allows (by default Linux refuses more than 2 MiB "
            "for both together, and each task also inherits its agent's environment)")


def show_number(value: int | float) -> str:
    """A number as a problem quotes it; huge integers are described (``str()`` of one with more
    than 4300 digits raises)."""
    if isinstance(value, int) and abs(value) >= 10**_SHOWN_DIGITS:
        return f"a number of {int(abs(value).bit_length() * _DIGITS_PER_BIT) + 1} digits or so"
    return str(value)


def show_text(value: str, limit: int = _SHOWN_CHARS) -> str:
    """A string as a problem quotes it: Python's quoting (control characters escaped), cut to
    about ``limit`` characters."""
    return repr(value) if len(value) <= limit else repr(value[:limit - 3] + "...")


def check_task_count(value: int) -> int:
    """``value`` if a task group may have that many tasks; else ValueError."""
    if value > MAX_TASKS:
        raise ValueError(f"must be at most {MAX_TASKS} (got {show_number(value)}): "
                         f"{TASK_LIMIT_REASON}")
    return value


def check_seconds(value: float) -> float:
    """``value`` if it is a duration tfcluster can wait for; else ValueError."""
    if value > MAX_SECONDS:
        raise ValueError(f"must be at most {MAX_SECONDS:g} seconds, i.e. 7 days (got {value:g})")
    return value


def check_heartbeat_interval(value: float) -> float:
    if value < MIN_HEARTBEAT_INTERVAL_S:
        raise ValueError(f"must be at least {MIN_HEARTBEAT_INTERVAL_S:g} seconds (got {value:g}): "
                         "a shorter interval has every agent flood the coordinator")
    return value


def check_restarts(value: int) -> int:
    if value > MAX_RESTARTS:
        raise ValueError(f"must be at most {MAX_RESTARTS} (got {show_number(value)}): a job that "
                         "failed that often will not recover by restarting")
    return value


#: A string passed to a program or a host (a user name): no NUL, valid Unicode.
Text = Annotated[str, AfterValidator(check_text)]
#: One argv word.
Word = Annotated[str, AfterValidator(check_word)]
#: A non-empty path (or program name) on some host.
PathText = Annotated[str, Field(min_length=1), AfterValidator(check_path)]


def scalar_to_str(value: object) -> object:
    """A YAML scalar under ``env`` or in argv, as text (``true``, ``1.10``); others unchanged."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        try:
            return str(value)
        except ValueError:  # an int of more than 4300 digits
            raise ValueError(f"is {show_number(value)}, too long to turn into text: quote it") from None
    return value
