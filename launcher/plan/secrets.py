"""Keeping secrets out of what tfcluster prints and records: ``tfcluster plan``, the console, events,
task failures and ``summary.json``.

One rule says which *names* are secret (:func:`looks_secret`): a name (any case; ``-`` and ``.``
count as ``_``) that contains ``KEY``, ``PASS``, ``SECRET``, ``TOKEN``, ``CREDENTIAL``, ``AUTH``,
``PRIVATE``, ``SIGNATURE``, ``COOKIE`` or ``SESSION``, ends in ``_PAT``, ``_PWD``, ``_PW`` or
``_SIG``, or is ``PAT`` or ``SIG``. It matches anywhere in the name, so ``KEYBOARD``, ``MONKEY``,
``AUTHOR`` or ``BYPASS`` are masked too: a harmless value hidden costs a look at the spec, a secret
shown cannot be taken back. Only a few well-known variables that never hold a secret are let through
(:data:`NOT_SECRET`, e.g. ``TOKENIZERS_PARALLELISM``).

One function masks secrets in any text (:func:`redact_text`), whatever variable or argument it
came from:

- credentials in URLs: ``scheme://user:password@host`` -> ``scheme://user:***@host``, and a user
  part alone, often a token (``https://ghp_x@github.com``), -> ``scheme://***@host`` (as pip's
  ``redact_auth_from_url`` does). As in every URL parser the user part ends at the first ``/``,
  ``?`` or ``#``: a password holding one of those unescaped is not a valid URL;
- ``NAME=value``, ``--name=value``, ``name="value"`` and ``?name=value`` with a secret name, and the
  word after an option with a secret name (``--password hunter2``);
- ``"name": "value"`` in JSON and Python reprs with a secret name;
- ``Authorization:`` headers, ``Bearer`` tokens, and tokens of well-known formats (GitHub, GitLab,
  Slack, AWS access key ids, Hugging Face, ``sk-`` API keys);
- values known to be secret (:func:`secret_values` of the job's env), wherever they appear.

:func:`masked` (an env) and :func:`redact_argv` (an argv) apply the same rules item by item;
:class:`Redactor` holds a job's known secret values for whoever redacts its output. Masking never
changes what is launched: only what is shown.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

MASK = "***"
#: Parts of a name that make it secret (matched anywhere, any case).
SECRET_WORDS = ("KEY", "PASS", "SECRET", "TOKEN", "CREDENTIAL", "AUTH", "PRIVATE", "SIGNATURE",
                "COOKIE", "SESSION")
#: Endings that make a name secret (``GITHUB_PAT``, ``DB_PWD``, ``AZURE_SIG``).
SECRET_SUFFIXES = ("_PAT", "_PWD", "_PW", "_SIG")
#: Whole names that are secret.
SECRET_NAMES = frozenset({"PAT", "SIG"})
#: Well-known names the words above match that never hold a secret.
NOT_SECRET = frozenset({"TOKENIZERS_PARALLELISM", "SSH_AUTH_SOCK"})
#: A known secret value shorter than this is not searched for in free text (it would mask every
#: ``1`` or ``true``); it is still masked wherever its name shows.
MIN_KNOWN_SECRET_CHARS = 6

# Every quantifier is bounded, so redacting a long line costs time linear in its length.
_NAME = r"[A-Za-z_][A-Za-z0-9_.-]{0,63}"
_URL = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]{0,31}://)([^\s/?#\"'<>\\]{1,2048})")
_ASSIGNMENT = re.compile(
    rf"(?<![A-Za-z0-9_.-])(-{{0,2}}{_NAME})=(?!=)"
    r"(\"(?:[^\"\\\n]|\\.){0,4096}\"|'(?:[^'\\\n]|\\.){0,4096}'|[^\s&;,'\")\]}>]{1,4096})")
_QUOTED_KEY = re.compile(
    rf"([\"'])({_NAME})\1(\s{{0,8}}:\s{{0,8}})"
    r"(\"(?:[^\"\\\n]|\\.){0,4096}\"|'(?:[^'\\\n]|\\.){0,4096}')")
_OPTION_WORD = re.compile(rf"(?<![A-Za-z0-9_-])(--?{_NAME})(\s{{1,8}})([^\s-][^\s]{{0,4095}})")
_HEADER = re.compile(r"(?i)\b((?:proxy-)?authorization\s{0,8}[:=]\s{0,8})"
                     r"(?:(basic|bearer|token|digest|negotiate)\s{1,8})?([^\s,;'\"]{1,4096})")
_BEARER = re.compile(r"(?i)\b(bearer\s{1,8})([A-Za-z0-9._~+/=-]{8,4096})")
_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{20,255}|github_pat_[A-Za-z0-9_]{20,255}"
    r"|glpat-[A-Za-z0-9_-]{20,255}|xox[abprs]-[A-Za-z0-9-]{10,255}|A[KS]IA[0-9A-Z]{16}"
    r"|hf_[A-Za-z0-9]{30,255}|sk-[A-Za-z0-9_-]{20,255})(?![A-Za-z0-9])")


def looks_secret(name: str) -> bool:
    """Whether a variable, option or field called ``name`` holds a secret (see the module)."""
    normal = re.sub(r"[-.]", "_", name.upper().lstrip("-"))
    if normal in NOT_SECRET:
        return False
    return (any(word in normal for word in SECRET_WORDS) or normal in SECRET_NAMES
            or normal.endswith(SECRET_SUFFIXES))


def _url_parts(authority: str) -> tuple[str, str | None, str] | None:
    """(user, password or None, host) of a URL authority with credentials, else None."""
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return None
    user, colon, password = userinfo.partition(":")
    return user, (password if colon else None), host


def _mask_url(found: re.Match[str]) -> str:
    parts = _url_parts(found.group(2))
    if parts is None:
        return found.group()
    user, password, host = parts
    userinfo = MASK if password is None else f"{user}:{MASK}"
    return f"{found.group(1)}{userinfo}@{host}"


def _mask_quoted(value: str) -> str:
    """``value`` masked, keeping its quotes if it has them."""
    return f"{value[0]}{MASK}{value[0]}" if value[:1] in ("'", '"') else MASK


def _mask_assignment(found: re.Match[str]) -> str:
    if not looks_secret(found.group(1)):
        return found.group()
    return f"{found.group(1)}={_mask_quoted(found.group(2))}"


def _mask_quoted_key(found: re.Match[str]) -> str:
    quote, name, colon, value = found.groups()
    if not looks_secret(name):
        return found.group()
    return f"{quote}{name}{quote}{colon}{_mask_quoted(value)}"


def _mask_option_word(found: re.Match[str]) -> str:
    option, space, _ = found.groups()
    if "=" in option or not looks_secret(option):
        return found.group()
    return f"{option}{space}{MASK}"


def _mask_header(found: re.Match[str]) -> str:
    scheme = f"{found.group(2)} " if found.group(2) else ""
    return f"{found.group(1)}{scheme}{MASK}"


def redact_text(text: str, known: Collection[str] = ()) -> str:
    """``text`` with every secret it holds replaced by ``***`` (the rules in the module docstring);
    ``known`` are values to mask wherever they appear (see :func:`secret_values`). Idempotent; time
    linear in ``len(text)``."""
    for value in sorted(known, key=len, reverse=True):
        if len(value) >= MIN_KNOWN_SECRET_CHARS and value in text:
            text = text.replace(value, MASK)
    if "://" in text:
        text = _URL.sub(_mask_url, text)
    if "=" in text:
        text = _ASSIGNMENT.sub(_mask_assignment, text)
    if ":" in text and ('"' in text or "'" in text):
        text = _QUOTED_KEY.sub(_mask_quoted_key, text)
    if "-" in text:
        text = _OPTION_WORD.sub(_mask_option_word, text)
    text = _HEADER.sub(_mask_header, text)
    text = _BEARER.sub(lambda found: f"{found.group(1)}{MASK}", text)
    return _TOKEN.sub(MASK, text)


def masked(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` as it may be shown: the value of a secret name is ``***``, any other value is
    :func:`redact_text`-ed (``DATABASE_URL=postgres://user:***@host/db``)."""
    return {name: (MASK if looks_secret(name) else redact_text(value))
            for name, value in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` as it may be shown: each word :func:`redact_text`-ed (``--db=postgres://u:***@h``,
    ``--token=***``), and the word after an option with a secret name (``--password ***``). A flag
    with such a name that takes no value (``--no-auth train.py``) hides the word after it too:
    which options take a value only the program knows, and a word hidden costs less than a
    password shown."""
    shown: list[str] = []
    for position, word in enumerate(argv):
        before = argv[position - 1] if position else ""
        takes_value = (before.startswith("-") and "=" not in before
                       and looks_secret(before) and not word.startswith("-"))
        shown.append(MASK if takes_value else redact_text(word))
    return shown


def secret_values(envs: Iterable[Mapping[str, str]]) -> frozenset[str]:
    """The values in ``envs`` that are secret: those of secret names and URL passwords (for
    :func:`redact_text`'s ``known``)."""
    values: set[str] = set()
    for env in envs:
        for name, value in env.items():
            if looks_secret(name):
                values.add(value)
            elif "://" in value:
                for found in _URL.finditer(value):
                    parts = _url_parts(found.group(2))
                    if parts is not None:
                        values.add(parts[1] if parts[1] is not None else parts[0])
    return frozenset(value for value in values if len(value) >= MIN_KNOWN_SECRET_CHARS)


@dataclass(frozen=True)
class Redactor:
    """:func:`redact_text` with a job's known secret values: call it on any line to be shown or
    recorded (``Redactor.for_envs(task.env for task in plan.tasks)``)."""

    known: frozenset[str] = frozenset()

    @classmethod
    def for_envs(cls, envs: Iterable[Mapping[str, str]]) -> Redactor:
        return cls(secret_values(envs))

    def __call__(self, text: str) -> str:
        return redact_text(text, self.known)
