"""Command-line values are checked where they are parsed: a time-out must be a positive, finite
number of seconds (``--connect-timeout nan`` used to reach pre-flight as "no answer within nans")."""

from __future__ import annotations

import pytest

from launcher.cli.parser import build_parser


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e308", "soon"])
def test_a_bad_connect_timeout_is_a_usage_error(value: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["preflight", "spec.yaml", "--connect-timeout", value])
    assert info.value.code == 2
    assert "--connect-timeout" in capsys.readouterr().err


def test_a_good_connect_timeout_is_taken() -> None:
    args = build_parser().parse_args(["preflight", "spec.yaml", "--connect-timeout", "2.5"])
    assert args.connect_timeout == 2.5
