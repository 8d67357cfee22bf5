"""What ``migronaut_core`` exports, the one list of control actions, and URI redaction."""

from __future__ import annotations

from typing import get_args

import pytest

import migronaut_core
from migronaut_core import ConfigInvalidError
from migronaut_core.audit import Finding
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.control import actions
from migronaut_core.background.coordinator import Answer
from migronaut_core.background.dry_run import DryRunReport, StepDryRunReport
from migronaut_core.background.estimate import MigrationEstimate
from migronaut_core.background.eta import EtaRange
from migronaut_core.background.failed import FailedDocument, FailedDocumentsView
from migronaut_core.background.indexes import ConvergeReport
from migronaut_core.background.lanes.lane import SliceResult
from migronaut_core.background.views import BackgroundStatusView
from migronaut_core.scrub import redact_uri


@pytest.mark.parametrize(
    "exported",
    [
        Answer,
        SliceResult,
        actions.ControlResult,
        DryRunReport,
        StepDryRunReport,
        Finding,
        ConvergeReport,
        CancelToken,
        BackgroundStatusView,
        FailedDocument,
        FailedDocumentsView,
        MigrationEstimate,
        EtaRange,
    ],
    ids=lambda exported: exported.__name__,
)
def test_the_result_types_are_exported_from_the_package(exported: type) -> None:
    assert exported.__name__ in migronaut_core.__all__
    assert getattr(migronaut_core, exported.__name__) is exported


def test_every_exported_name_exists() -> None:
    assert len(set(migronaut_core.__all__)) == len(migronaut_core.__all__)
    for name in migronaut_core.__all__:
        assert hasattr(migronaut_core, name), name


def test_the_control_actions_are_listed_once_and_every_table_covers_them() -> None:
    assert get_args(migronaut_core.ControlAction) == migronaut_core.CONTROL_ACTIONS
    assert set(actions.SUMMARIES) == set(actions.CONTROL_ACTIONS)
    assert set(actions.DONE) == set(actions.CONTROL_ACTIONS)
    assert set(actions.LABELS) == set(actions.CONTROL_ACTIONS)
    assert set(actions.EXPLANATIONS) == set(actions.CONTROL_ACTIONS)
    for subset in (actions.RESTARTING, actions.DESTRUCTIVE, actions.STOPPING, actions.RETRYING):
        assert subset <= set(actions.CONTROL_ACTIONS)


@pytest.mark.parametrize("action", actions.CONTROL_ACTIONS)
def test_check_control_accepts_every_action(action: str) -> None:
    assert actions.check_control(action) == action


@pytest.mark.parametrize(
    ("action", "options", "key"),
    [
        ("explode", {}, "action"),
        ("Pause", {}, "action"),
        ("resume", {"wait": True}, "wait"),
        ("unlock", {"wait": True}, "wait"),
        ("pause", {"repin": True}, "repin"),
        ("repin", {"repin": True}, "repin"),
        ("retry_from_start", {"failed_only": True}, "failed_only"),
        ("pause", {"failed_only": True}, "failed_only"),
    ],
)
def test_check_control_refuses_unknown_actions_and_options_that_do_not_fit(
    action: str, options: dict[str, bool], key: str
) -> None:
    with pytest.raises(ConfigInvalidError) as error:
        actions.check_control(action, **options)
    assert error.value.context["key"] == key


def test_a_control_result_shows_only_what_the_action_reports() -> None:
    assert actions.ControlResult("changed", "paused").to_dict() == {
        "applied": "changed",
        "status": "paused",
    }
    unlocked = actions.ControlResult("changed", "running", lock=True, leases=2)
    assert unlocked.to_dict() == {
        "applied": "changed",
        "status": "running",
        "lock": True,
        "leases": 2,
    }


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("mongodb://ana:secret@db:27017/app", "mongodb://***@db:27017/app"),
        ("mongodb+srv://ana:s3cr%40t@cluster.example/app", "mongodb+srv://***@cluster.example/app"),
        ("mongodb://db:27017/app", "mongodb://db:27017/app"),
        (
            "failed: mongodb://a:b@h1/ then mongodb://c:d@h2/",
            "failed: mongodb://***@h1/ then mongodb://***@h2/",
        ),
    ],
)
def test_redact_uri_hides_credentials_wherever_a_uri_appears(text: str, redacted: str) -> None:
    assert redact_uri(text) == redacted
