"""tfcluster as a user installs it: the wheel with its ``tf`` extra in a clean venv outside the clone.

The venv gets exactly one TensorFlow (the CPU build on Linux x86_64, not the full build beside
it), scikit-learn for the examples and the ``tensorboard`` that ``tfcluster status`` suggests.
Then the README's first command runs there, ``tfcluster local -n 2 -m worker.examples.digits``,
from a directory that is not the clone, and a spec run whose tasks start by interpreter path
(``python:``, as on a remote host) ends with the same weights.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.tfjobs import Finished, requires_tf
from tests.support.wheelhouse import build_wheel, wheelhouse

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600), requires_tf]

STEPS = ["--steps", "60", "--deterministic", "--checkpoint-every", "0"]


def clean_env(venv: Path) -> dict[str, str]:
    """This process's environment as a user's shell with ``venv`` activated would have it."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with ``tfcluster[tf]`` installed from its wheel, offline (the wheelhouse)."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(tmp / "dist")
    house = wheelhouse("tf")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index",
         "--no-compile", "--disable-pip-version-check", "--find-links", str(house), f"{wheel}[tf]"],
        check=False, capture_output=True, text=True, timeout=400, env=clean_env(venv),
        cwd=tmp)
    assert install.returncode == 0, install.stderr[-3000:]
    return venv


def installed(venv: Path) -> set[str]:
    listing = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"],
        capture_output=True, text=True, check=True, timeout=60)
    return {name.lower().replace("_", "-") for name in listing.stdout.split()}


def test_the_tf_extra_installs_one_tensorflow_what_the_examples_need_and_tensorboard(
        venv: Path) -> None:
    names = installed(venv)
    builds = {"tensorflow", "tensorflow-cpu"} & names
    cpu_build = sys.platform == "linux" and platform.machine() == "x86_64"
    assert builds == ({"tensorflow-cpu"} if cpu_build else {"tensorflow"}), sorted(names)
    assert "tf-keras" not in names  # it would bring the full build: tfcluster[tf-gpu] has it
    assert {"tfcluster", "scikit-learn", "tensorboard"} <= names
    assert (venv / "bin" / "tensorboard").exists()  # what `tfcluster status` suggests


def run_in(venv: Path, cwd: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=False, cwd=cwd, env=clean_env(venv), capture_output=True,
                          text=True, timeout=300)


def test_local_and_a_spec_with_an_interpreter_path_run_digits_from_the_installed_wheel(
        venv: Path, tmp_path: Path) -> None:
    local = run_in(venv, tmp_path, [str(venv / "bin" / "tfcluster"), "local", "-n", "2", "--quiet",
                                    "--run-dir", "local-run", "-m", "worker.examples.digits",
                                    "--", *STEPS])
    assert local.returncode == 0, local.stderr[-3000:]
    reference = Finished(tmp_path / "local-run", tmp_path, 0, local.stderr).final_hash()

    # As on a remote host: the tasks' interpreter by its path, the coordinator another install.
    spec = tmp_path / "digits.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "digits-wheel",
        "entrypoint": {"module": "worker.examples.digits", "args": STEPS},
        "python": str(venv / "bin" / "python"),
        "checkpoint": {"dir": str(tmp_path / "spec-ckpt")},
        "tasks": [{"type": "worker", "host": "localhost", "count": 2}],
    }))
    run = run_in(venv, tmp_path, [sys.executable, "-m", "launcher", "run", str(spec),
                                  "--run-dir", "spec-run"])
    assert run.returncode == 0, run.stderr[-3000:]
    finished = Finished(tmp_path / "spec-run", tmp_path / "spec-ckpt", 0, run.stderr)
    assert finished.final_hash() == reference
    plan = run_in(venv, tmp_path, [sys.executable, "-m", "launcher", "plan", "--json", str(spec)])
    assert [host["python"] for host in json.loads(plan.stdout)["hosts"]] == [
        str(venv / "bin" / "python")]
