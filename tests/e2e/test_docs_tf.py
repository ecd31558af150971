"""The one documentation snippet that needs real TensorFlow: Getting started's custom training
loop (``train_custom.py``, ``TrainingCheckpoint``) on a two-worker cluster, run as the page shows
it (the ``<!-- doc-test: tf -->`` block), about 10 s here. It must train every step and leave the
chief's checkpoints where tfcluster finds them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.tfjobs import TEST_TIMEOUT_S, requires_tf
from tests.support.doc_snippets import DOCS, all_snippets, replay, sandbox_in

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S), requires_tf]


def test_getting_started_custom_loop_runs_under_real_tensorflow(tmp_path: Path) -> None:
    page = DOCS / "getting-started.md"
    assert [s.page for s in all_snippets() if s.marker == "tf"] == [page]
    sandbox = sandbox_in(tmp_path)
    ran = replay(page, sandbox, frozenset({"tf"}), TEST_TIMEOUT_S - 30)
    assert len(ran) == 1 and "train_custom.py" in ran[0].body
    state = (sandbox / "runs/ckpt/checkpoint").read_text(encoding="utf-8")
    assert re.search(r'^model_checkpoint_path: ".*ckpt-60"$', state, re.M), state
    assert not list((sandbox / "runs/ckpt").glob("workertemp_*"))  # only the chief's copy stays
