"""Every verb says what it does (a one-line help in ``tfcluster --help`` and a description in its
own ``--help``), ``--version`` says the version, and ``tfcluster completion bash`` completes
verbs, options, option values and files in a real bash (``complete -p``, ``compgen``)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest

from launcher.cli.completion import script
from launcher.cli.main import main
from launcher.cli.parser import build_parser
from worker.wire.version import TFCLUSTER_VERSION


def subparsers() -> argparse._SubParsersAction[argparse.ArgumentParser]:
    found = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return found[0]


def verbs() -> dict[str, argparse.ArgumentParser]:
    return dict(subparsers().choices)


def test_every_verb_has_a_help_line_and_a_description() -> None:
    listed = {a.dest: a.help for a in subparsers()._get_subactions()}
    assert set(listed) == set(verbs())
    for name, verb in verbs().items():
        assert listed[name], f"{name} has no help line in tfcluster --help"
        assert verb.description and len(verb.description) > 40, f"{name} has no description"
        for action in verb._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"tfcluster {TFCLUSTER_VERSION}\n"


def test_completion_verb_prints_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "zsh"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("autoload -U +X bashcompinit && bashcompinit\n")
    assert out.endswith("complete -o filenames -F _tfcluster tfcluster\n")


def complete(tmp_path: Path, line: list[str]) -> list[str]:
    """What bash offers for the last word of ``line`` with the generated script loaded."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.fail("bash is needed to test the completion script")
    path = tmp_path / "tfcluster.bash"
    path.write_text(script(build_parser(), "bash"))
    words = " ".join(f"'{word}'" for word in line)
    program = (f"source {path}; complete -p tfcluster >/dev/null || exit 3; "
               f"COMP_WORDS=({words}); COMP_CWORD={len(line) - 1}; _tfcluster; "
               "printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run([bash, "--norc", "-c", program], capture_output=True, text=True,
                          cwd=tmp_path, timeout=30, check=True)
    return [word for word in done.stdout.splitlines() if word]


@pytest.mark.timeout(60)
def test_bash_completes_verbs_options_values_and_files(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("name: x\n")
    (tmp_path / "runs").mkdir()
    assert set(complete(tmp_path, ["tfcluster", ""])) >= {"run", "local", "plan", "status",
                                                          "logs", "completion", "--version"}
    assert complete(tmp_path, ["tfcluster", "lo"]) == ["local", "logs"]
    assert complete(tmp_path, ["tfcluster", "local", "--ch"]) == ["--chief", "--checkpoint-dir"]
    assert "--connect-timeout" not in complete(tmp_path, ["tfcluster", "local", "--"])
    assert complete(tmp_path, ["tfcluster", "run", "jo"]) == ["job.yaml"]
    assert complete(tmp_path, ["tfcluster", "run", "--run-dir", ""]) == ["runs"]
    assert complete(tmp_path, ["tfcluster", "local", "-n", ""]) == []
    assert complete(tmp_path, ["tfcluster", "completion", ""]) == ["bash", "zsh"]
    assert complete(tmp_path, ["tfcluster", "local", "-n", "2", "--", "python3", "jo"]) == \
        ["job.yaml"]
