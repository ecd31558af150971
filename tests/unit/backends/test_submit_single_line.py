"""``tfcluster submit``: every value that reaches the batch script (its ``#SBATCH`` lines and its
shell lines) is one line. A newline in a value would end the ``#SBATCH`` comment and run the rest as
a command of the batch script on the first node; such a value is refused, naming the option."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launcher.backends.slurm.sbatch import BatchRequest, batch_script
from launcher.backends.slurm.submit import SlurmSubmitter
from launcher.errors import UsageError
from launcher.spec.loading import spec_from_dict

INJECTED = "x\ntouch /tmp/tfcluster-pwned"


def options(**given: Any) -> dict[str, Any]:
    return {"nodes": 1, "grace": 120, "run_dir": None, "time": None, "partition": None,
            "account": None, "sbatch_arg": [], **given}


SPEC = spec_from_dict({"name": "s", "entrypoint": {"module": "m"}, "tasks": [{"type": "worker"}],
                       "slurm": {}})


@pytest.mark.parametrize(("option", "given"), [
    ("--partition", {"partition": INJECTED}),
    ("--account", {"account": INJECTED}),
    ("--time", {"time": "1:00:00\nrm -rf ~"}),
    ("--sbatch-arg", {"sbatch_arg": ["--qos=high", "--comment=a\rb"]}),
    ("--run-dir", {"run_dir": "runs/a\nb"}),
    ("--partition", {"partition": "a\x00b"}),
])
def test_a_value_of_more_than_one_line_is_refused_naming_its_option(
        option: str, given: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as raised:
        SlurmSubmitter().dryrun(SPEC, "spec.yaml", options(**given))
    message = str(raised.value)
    assert option in message and "\n" not in message


def test_a_current_directory_whose_name_has_a_newline_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    odd = tmp_path / "a\ntouch pwned"
    odd.mkdir()
    monkeypatch.chdir(odd)
    with pytest.raises(UsageError) as raised:
        SlurmSubmitter().dryrun(SPEC, str(tmp_path / "spec.yaml"),
                                options(run_dir=str(tmp_path / "run")))
    message = str(raised.value)
    assert "current directory" in message and "\n" not in message


def test_the_script_cannot_be_written_with_a_line_break_in_any_value() -> None:
    base = dict(spec="/s.yaml", run_dir="/runs/s", script="/runs/s.sbatch", job_name="tfcluster-s",
                nodes=1, python="/py", workdir="/w")
    for field, value, named in [("workdir", "/w\nid", "current directory"),
                                ("python", "/py\rid", "interpreter"), ("spec", "/s\n", "SPEC"),
                                ("partition", "p\nid", "--partition"),
                                ("extra", ("--qos=a\nid",), "--sbatch-arg")]:
        with pytest.raises(UsageError, match=named):
            batch_script(BatchRequest(**{**base, field: value}))  # type: ignore[arg-type]


def test_one_line_values_are_still_quoted_into_the_script(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    request = SlurmSubmitter().dryrun(SPEC, "spec.yaml", options(partition="gpu; id",
                                                                  sbatch_arg=["--qos=high"]))
    script = batch_script(request)
    assert "#SBATCH '--partition=gpu; id'" in script.splitlines()
    assert "#SBATCH --qos=high" in script.splitlines()
