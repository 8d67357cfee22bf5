"""Warnings said once per key, and said again once forgotten."""

from __future__ import annotations

import logging
import threading

import pytest

from migronaut_core.background.warn_once import WarnOnce

LOGGER = "tests.warn_once"


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == LOGGER]


def test_each_key_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    warn = WarnOnce(logging.getLogger(LOGGER))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            warn("a:users", "%s has no index", "users")
            warn("b:users", "%s is sharded", "users")
    assert said(caplog) == ["users has no index", "users is sharded"]


def test_forgotten_keys_are_warned_about_again(caplog: pytest.LogCaptureFixture) -> None:
    warn = WarnOnce(logging.getLogger(LOGGER))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        warn("a:users", "first")
        warn("a:orders", "second")
        warn.forget(lambda key: key.endswith(":users"))
        assert "a:users" not in warn
        assert "a:orders" in warn
        warn("a:users", "first again")
        warn("a:orders", "second again")
    assert said(caplog) == ["first", "second", "first again"]


def test_threads_racing_on_one_key_warn_once(caplog: pytest.LogCaptureFixture) -> None:
    warn = WarnOnce(logging.getLogger(LOGGER))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        threads = [threading.Thread(target=warn, args=("k", "once")) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert said(caplog) == ["once"]
