"""``undo`` and ``undo_retention``: declarative migrations with a revision only, a bounded
retention, stored and read back."""

from __future__ import annotations

from typing import Any

import pytest

from migronaut_core.background.spec import read_stored, resolve_spec
from migronaut_core.background.spec.model import DEFAULT_UNDO_RETENTION_S
from tests.support.spec import NAME, module, refused, resolve, step

JOURNALED = {"revision_field": "rev", "undo": "journal"}


def test_undo_is_off_by_default_and_retention_defaults_to_seven_days() -> None:
    spec = resolve()
    assert spec.undo is None
    assert spec.undo_retention_s == DEFAULT_UNDO_RETENTION_S == 7 * 86_400


@pytest.mark.parametrize(
    ("retention", "seconds"),
    [(3_600, 3_600), ("90m", 5_400), ("36h", 129_600), ("7d", 604_800), ("365d", 31_536_000)],
)
def test_retention_takes_seconds_or_text_with_a_unit(retention: Any, seconds: int) -> None:
    spec = resolve(**JOURNALED, undo_retention=retention)
    assert (spec.undo, spec.undo_retention_s) == ("journal", seconds)


@pytest.mark.parametrize("retention", [59, "59m", "366d", "7 d", "7w", "d", True, 1.5, "-1d"])
def test_retention_outside_an_hour_to_a_year_is_refused(retention: Any) -> None:
    error = refused(lambda: resolve(**JOURNALED, undo_retention=retention), "undo_retention")
    assert "between 3600 and 31536000 seconds" in error.message


@pytest.mark.parametrize("undo", ["Journal", "log", True, 1])
def test_undo_takes_only_journal(undo: Any) -> None:
    refused(lambda: resolve(revision_field="rev", undo=undo), "undo")


def test_undo_needs_a_revision_field() -> None:
    error = refused(lambda: resolve(undo="journal"), "undo")
    assert "revision_field" in error.message


def test_undo_is_refused_in_update_mode_naming_the_mode() -> None:
    update = [{"$set": {"first": "$name"}}]
    error = refused(lambda: resolve(**JOURNALED, update=update), "undo")
    assert "update mode" in error.message


def test_undo_is_refused_in_step_mode() -> None:
    background = {"mode": "step", "from": 1, "to": 2, "undo": "journal", "revision_field": "r"}
    error = refused(lambda: resolve_spec(NAME, module(background, step=step)), "undo")
    assert "step mode" in error.message


def test_the_stored_spec_keeps_undo_and_its_retention() -> None:
    spec = resolve(**JOURNALED, undo_retention="2d")
    stored = spec.to_document()
    assert (stored["undo"], stored["undo_retention"]) == ("journal", 172_800)
    assert read_stored(stored) == spec


def test_a_spec_stored_before_undo_existed_reads_as_off() -> None:
    stored = resolve().to_document()
    del stored["undo"], stored["undo_retention"]
    assert read_stored(stored) == resolve()
