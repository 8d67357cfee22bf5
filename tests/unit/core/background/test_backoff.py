"""Capped exponential back-off, and the schedules of the engine's retry loops."""

from __future__ import annotations

import random

import pytest

from migronaut_core.background.backoff import Backoff
from migronaut_core.background.engine.transactional import TRANSIENT_BACKOFF
from migronaut_core.background.lanes.driver import FAILED_SLICE_BACKOFF


def test_doubles_from_the_first_wait_up_to_the_cap() -> None:
    backoff = Backoff(first=0.25, cap=2.0)
    assert [backoff.seconds(n) for n in range(1, 7)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]


def test_a_failed_slice_waits_exactly_without_jitter() -> None:
    waits = [FAILED_SLICE_BACKOFF.seconds(n) for n in range(1, 8)]
    assert waits == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])


@pytest.mark.parametrize("failures", [1, 2, 3, 5, 9])
def test_full_jitter_waits_up_to_the_bound(failures: int) -> None:
    bound = min(2.0, 0.05 * 2**failures)
    waits = [TRANSIENT_BACKOFF.seconds(failures) for _ in range(200)]
    assert all(0 <= wait <= bound for wait in waits)
    assert min(waits) < bound / 2 < max(waits)


def test_half_jitter_waits_between_half_and_all() -> None:
    backoff = Backoff(first=0.5, cap=30.0, jitter=0.5)
    waits = [backoff.seconds(3) for _ in range(200)]
    assert all(1.0 <= wait <= 2.0 for wait in waits)
    assert [backoff.seconds(20) <= 30.0 for _ in range(20)] == [True] * 20


def test_jitter_draws_from_the_shared_generator() -> None:
    random.seed(5)
    first = Backoff(first=1.0, cap=8.0, jitter=1.0).seconds(2)
    random.seed(5)
    assert random.random() * 2.0 == first
