"""The throttle registry: one controller per migration and group, shared, then forgotten."""

from __future__ import annotations

import threading

import pytest

from migronaut_core.background.spec import AdaptiveSettings
from migronaut_core.background.throttle import (
    AdaptiveController,
    ThrottleRegistry,
)
from tests.support.throttle import SETTINGS


@pytest.fixture
def registry() -> ThrottleRegistry:
    return ThrottleRegistry()


# ─── The registry ─────────────────────────────────────────────────────────────


def test_registry_shares_one_controller_per_migration_and_group(
    registry: ThrottleRegistry,
) -> None:
    first = registry.adaptive_for("m1", "shardA", SETTINGS, {"batch_size": 100})
    assert registry.adaptive_for("m1", "shardA", SETTINGS, {"batch_size": 300}) is first
    assert first.batch_size() == 100  # a later partition's state does not reseed it
    assert registry.adaptive_for("m1", "shardB", SETTINGS) is not first
    assert registry.adaptive_for("m1", None, SETTINGS) is not first
    assert registry.adaptive_for("m2", "shardA", SETTINGS) is not first
    assert ThrottleRegistry().adaptive_for("m1", "shardA", SETTINGS) is not first  # another kit


def test_registry_replaces_a_controller_whose_settings_changed_keeping_its_state(
    registry: ThrottleRegistry,
) -> None:
    first = registry.adaptive_for("m1", None, SETTINGS, {"batch_size": 100, "pause_ms": 300})
    narrower = AdaptiveSettings(min_batch_size=10, max_batch_size=80, max_pause_ms=200)
    second = registry.adaptive_for("m1", None, narrower)
    assert second is not first
    assert (second.batch_size(), second.pause_ms()) == (80, 200)
    assert registry.adaptive_for("m1", None, narrower) is second


def test_registry_is_shared_between_threads(registry: ThrottleRegistry) -> None:
    found: list[AdaptiveController] = []
    lock = threading.Lock()

    def claim() -> None:
        controller = registry.adaptive_for("m1", "g", SETTINGS)
        with lock:
            found.append(controller)

    threads = [threading.Thread(target=claim) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(controller) for controller in found}) == 1


def test_forget_drops_the_controllers_of_one_migration_or_all(
    registry: ThrottleRegistry,
) -> None:
    registry.adaptive_for("m1", None, SETTINGS)
    registry.adaptive_for("m1", "g", SETTINGS)
    registry.adaptive_for("m2", None, SETTINGS)
    assert registry.migrations() == {"m1", "m2"}
    assert registry.forget("m1") == 2
    assert registry.migrations() == {"m2"}
    assert registry.forget() == 1
    assert registry.migrations() == frozenset()


def test_a_forgotten_controller_resumes_from_the_stored_state(
    registry: ThrottleRegistry,
) -> None:
    first = registry.adaptive_for("m1", None, SETTINGS, {"batch_size": 100})
    registry.forget("m1")
    again = registry.adaptive_for("m1", None, SETTINGS, {"batch_size": 300})
    assert again is not first
    assert again.batch_size() == 300
