"""The bundled examples say in one line what is missing and how to install it, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.jobs import REPO
from worker.examples.needs import install_hint, need


def test_a_missing_module_is_one_line_naming_it_and_the_install_command() -> None:
    with pytest.raises(SystemExit) as exited:
        need("sklearn_not_installed_here.datasets")
    message = str(exited.value.code)
    assert "\n" not in message
    assert "needs sklearn_not_installed_here" in message and "pip install 'tfcluster[tf]'" in message


def test_scikit_learn_and_tf_keras_hints_keep_one_tensorflow() -> None:
    assert "pip install 'tfcluster[tf]'" in install_hint("sklearn.datasets")
    hint = install_hint("tf_keras")
    assert "--no-deps" in hint and "tfcluster[tf-gpu]" in hint


def test_an_example_without_scikit_learn_exits_with_the_hint() -> None:
    # sklearn made unimportable for the child only: its load_data is the first thing that needs it.
    code = ("import sys; sys.modules['sklearn'] = None\n"
            "from worker.examples.digits import load_data\nload_data()")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "this example needs sklearn, which is not installed: pip install 'tfcluster[tf]' "
        "(or: pip install scikit-learn)"]
