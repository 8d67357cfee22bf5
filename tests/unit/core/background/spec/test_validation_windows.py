"""A spec's ``windows``: checked like every key, stored and read back, absent by default."""

from __future__ import annotations

from typing import Any

import pytest

from migronaut_core.background.spec import read_stored
from tests.support.spec import SECRET, refused, resolve

NIGHTS: list[dict[str, Any]] = [
    {"days": ["mon", "tue"], "from": "22:00", "to": "06:00", "timezone": "Europe/Paris"},
    {"days": ["sat", "sun"], "from": "00:00", "to": "24:00", "rate": "500/s"},
]


def test_a_spec_without_windows_leaves_them_to_the_target() -> None:
    spec = resolve()
    assert spec.windows is None
    assert spec.to_document()["windows"] is None
    assert read_stored(spec.to_document()).windows is None


def test_an_empty_list_means_always_open() -> None:
    spec = resolve(windows=[])
    assert spec.windows == ()
    assert read_stored(spec.to_document()).windows == ()


def test_windows_are_stored_and_read_back() -> None:
    spec = resolve(windows=NIGHTS)
    assert spec.windows is not None
    assert [window.days for window in spec.windows] == [(0, 1), (5, 6)]
    stored = spec.to_document()
    assert stored["windows"][0]["rate"] == 1.0
    assert stored["windows"][1]["rate"] == "500/s"
    assert read_stored(stored) == spec


def test_a_stored_spec_of_an_older_release_has_no_windows() -> None:
    stored = resolve().to_document()
    del stored["windows"]
    assert read_stored(stored).windows is None


@pytest.mark.parametrize(
    ("windows", "key", "words"),
    [
        (
            [{"days": ["funday"], "from": "01:00", "to": "02:00"}],
            "windows.0.days",
            "must be one of",
        ),
        ([{"from": "01:00", "to": "01:00"}], "windows.0.to", "must differ"),
        (
            [NIGHTS[0], {"from": "01:00", "to": "02:00", "timezone": SECRET}],
            "windows.1.timezone",
            "IANA",
        ),
        ([{"from": "01:00", "to": "02:00", "rate": 2}], "windows.0.rate", "between 0.01 and 1"),
        ([{"from": "01:00", "to": "02:00", "rate": "-5/s"}], "windows.0.rate", "/s"),
        ("nightly", "windows", "must be a list"),
    ],
)
def test_a_bad_window_is_a_typed_error_naming_the_key(windows: Any, key: str, words: str) -> None:
    error = refused(lambda: resolve(windows=windows), key)
    assert f"background.{key} " in error.message
    assert words in error.message
