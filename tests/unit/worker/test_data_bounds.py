"""How ``worker.data.resumable_input`` splits a global batch between replicas (no TensorFlow)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from worker.data import replica_bounds


@pytest.mark.parametrize(("batch", "replicas", "sizes"), [
    (64, 2, [32, 32]), (64, 3, [21, 21, 22]), (7, 7, [1] * 7), (10, 4, [2, 3, 2, 3])])
def test_every_example_goes_to_exactly_one_replica_as_evenly_as_can_be(
        batch: int, replicas: int, sizes: list[int]) -> None:
    bounds = replica_bounds(batch, replicas)
    assert bounds[0] == 0 and bounds[-1] == batch
    assert [b - a for a, b in pairwise(bounds)] == sizes


def test_a_batch_smaller_than_the_replicas_is_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match="raise the batch size"):
        replica_bounds(2, 3)
