"""``tfcluster schema``: print the spec's JSON Schema (launcher.spec.schema), for an editor's YAML
support (``# yaml-language-server: $schema=...`` at the top of a spec) or any JSON Schema tool."""

from __future__ import annotations

import argparse
import sys

HELP = "print the cluster spec's JSON Schema (for editors' YAML checking and completion)"
DESCRIPTION = (
    "Print the JSON Schema of a cluster spec: every field with its type, default and "
    "description. Save it (tfcluster schema > tfcluster-spec.schema.json) and point an "
    "editor's YAML support at it, e.g. a first line '# yaml-language-server: "
    "$schema=tfcluster-spec.schema.json' in the spec. Rules across fields (one chief, known "
    "hosts, ports used once) are checked by 'tfcluster validate' only.")


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = verbs.add_parser("schema", help=HELP, description=DESCRIPTION)
    sub.add_argument("-o", "--output", metavar="FILE",
                     help="write the schema to FILE instead of printing it")


def cmd_schema(args: argparse.Namespace) -> int:
    from launcher.spec.schema import spec_json_schema_text

    text = spec_json_schema_text()
    if args.output is None:
        sys.stdout.write(text)
        return 0
    from launcher.errors import UsageError

    try:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        raise UsageError(f"tfcluster schema: cannot write {args.output}: "
                         f"{exc.strerror or exc}") from None
    return 0
