"""The CLI reference: every ``tfcluster`` verb with its usage, description and every option, read
from the argparse parser the command itself builds (:func:`launcher.cli.parser.build_parser`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from launcher.reference.markdown import GENERATED, code, table, text


@dataclass(frozen=True)
class Option:
    """One argument of a verb as the reference shows it."""

    names: tuple[str, ...]  # ("-n", "--num-tasks"), or ("SPEC",) for a positional
    argument: str
    default: str
    help: str


@dataclass(frozen=True)
class Verb:
    name: str
    summary: str
    description: str
    usage: str
    options: tuple[Option, ...]


def verbs(parser: argparse.ArgumentParser) -> list[Verb]:
    """Every verb of ``parser`` in the order ``tfcluster --help`` lists them."""
    found = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            found.append(Verb(name, summaries.get(name, ""), sub.description or "",
                              sub.format_usage().removeprefix("usage: ").strip(),
                              tuple(options(sub))))
    return found


def options(parser: argparse.ArgumentParser) -> list[Option]:
    """The arguments of one (sub)parser a user can give, ``--help`` included."""
    found = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings:
            names = tuple(action.option_strings)
            takes = action.nargs != 0
            argument = (action.metavar or action.dest.upper()) if takes else ""
        else:
            names = (str(action.metavar or action.dest),)
            argument = "..." if action.nargs in (argparse.REMAINDER, "*", "+") else ""
        default = action.default
        hidden = default is None or default is False or default in ([], argparse.SUPPRESS)
        shown = "" if hidden or not action.option_strings else str(default)
        found.append(Option(names, str(argument), shown, action.help or ""))
    return found


def render(parser: argparse.ArgumentParser) -> str:
    """The CLI reference page (Markdown)."""
    out = ["# CLI reference\n", GENERATED.format(source="the argument parser "
           "(`launcher/cli/parser.py`)"),
           "`tfcluster` (also `python -m launcher`) takes a verb. Every verb prints this help "
           "with `tfcluster VERB --help`; `tfcluster --version` prints the version.\n"]
    out.append(table(("Verb", "What it does"),
                     ((f"[`{verb.name}`](#tfcluster-{verb.name})", text(verb.summary))
                      for verb in verbs(parser))))
    out.append("\nOptions of `tfcluster` itself:\n")
    out.append(_options_table(options(parser)))
    for verb in verbs(parser):
        out.append(f"## tfcluster {verb.name}\n")
        out.append(f"```text\n{verb.usage}\n```\n")
        if verb.description:
            out.append(text(verb.description) + "\n")
        out.append(_options_table(verb.options))
    return "\n".join(out)


def _options_table(found: list[Option] | tuple[Option, ...]) -> str:
    rows = ((", ".join(code(name) for name in option.names),
             code(option.argument) if option.argument else "",
             code(option.default) if option.default else "",
             text(option.help)) for option in found)
    return table(("Option", "Argument", "Default", "Meaning"), rows)
