"""Each verb's --help says what it does and offers only what applies to it: ``local`` runs every
task on this machine (no SSH options), ``validate`` says what it checks and how it exits."""

from __future__ import annotations

import pytest

from launcher.cli.parser import build_parser


def help_of(verb: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([verb, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_local_help_offers_no_ssh_options(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of("local", capsys)
    assert "--connect-timeout" not in text and "--accept-new-host-keys" not in text
    assert "--run-dir" in text  # what it does offer
    assert "--connect-timeout" in help_of("run", capsys)  # a spec's hosts may be remote


def test_validate_help_says_what_it_checks_and_how_it_exits(
        capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(help_of("validate", capsys).split())
    assert "without starting or contacting anything" in text and "Exits 0" in text
