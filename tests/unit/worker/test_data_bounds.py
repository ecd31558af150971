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


@pytest.mark.parametrize(("batch", "replicas"), [(64, 1), (64, 2), (64, 4), (96, 3), (96, 6)])
def test_a_batch_that_divides_gives_every_replica_global_over_replicas(
        batch: int, replicas: int) -> None:
    bounds = replica_bounds(batch, replicas, require_divisible=True)
    assert {b - a for a, b in pairwise(bounds)} == {batch // replicas}


@pytest.mark.parametrize(("batch", "replicas"), [(64, 3), (10, 4), (7, 2)])
def test_a_batch_that_does_not_divide_is_refused_on_request_naming_both_numbers(
        batch: int, replicas: int) -> None:
    with pytest.raises(ValueError, match=rf"^a global batch of {batch} does not divide among the "
                                         rf"{replicas} replicas of this attempt: use a multiple "
                                         rf"of {replicas} "):
        replica_bounds(batch, replicas, require_divisible=True)
    assert replica_bounds(batch, replicas)[-1] == batch  # the default splits it as evenly as can be


@pytest.mark.parametrize("batch", [1, 2, 7, 10, 64, 96])
def test_at_every_replica_count_the_slices_in_replica_order_are_the_global_batch(batch: int) -> None:
    """What keeps the sample order when an elastic job changes size: replica r of R sees
    ``batch[bounds[r]:bounds[r+1]]``, and those slices, in replica order, are the whole global batch
    for every R (the position, in global batches, is skipped before the split)."""
    examples = list(range(100, 100 + batch))
    for replicas in range(1, batch + 1):
        bounds = replica_bounds(batch, replicas)
        slices = [examples[a:b] for a, b in pairwise(bounds)]
        assert all(slices) and [e for s in slices for e in s] == examples, replicas
