"""The kit's old flat names: each warns and does what it did, through its new namespace.

Every name of :data:`migronaut_core.kit.aliases.ALIASES` is called on one kit
(expecting a ``DeprecationWarning`` naming the replacement) and its replacement
on a twin kit over an identical database; the two results, as JSON with the
moment-bound fields left out, are equal, dicts where the old name gave dicts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from migronaut_core import Migronaut, MigronautError
from migronaut_core.json_shape import to_json
from migronaut_core.kit.aliases import ALIASES
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background

pytestmark = pytest.mark.integration

N = SPLIT_NAME
Call = Callable[[Migronaut], Any]
#: Fields that name a moment, a process or a store id: equal calls on twins may differ there.
_VOLATILE = {
    "at",
    "id",
    "run_id",
    "registration",
    "plan",
    "owner",
    "host",
    "pid",
    "eta_seconds",
    "eta_range",
    "average_docs_per_second",
}


def _up(kit: Migronaut) -> None:
    kit.runs.up()


def _ran(kit: Migronaut) -> None:
    kit.runs.up()
    kit.background.run(N)


def _paused(kit: Migronaut) -> None:
    kit.runs.up()
    kit.background.control(N, "pause")


def _cancelled(kit: Migronaut) -> None:
    kit.runs.up()
    kit.background.control(N, "cancel")


def _coordinated(kit: Migronaut) -> None:
    kit.runs.up()
    kit.background.coordinate(N)


def _nothing(kit: Migronaut) -> None:
    pass


def _stopped(watcher: Any) -> str:
    watcher.stop()
    return type(watcher).__name__


def _kind(value: Any) -> str:
    return type(value).__name__


#: old name -> (set-up, the old call, the new call giving the old result, shape compared)
CASES: dict[str, tuple[Call, Call, Call, Callable[[Any], Any] | None]] = {
    "up": (_nothing, lambda k: k.up(), lambda k: k.runs.up(), None),
    "down": (_up, lambda k: k.down(), lambda k: k.runs.down(), None),
    "status": (_up, lambda k: k.status(), lambda k: k.runs.status(), None),
    "plan_up": (_nothing, lambda k: k.plan_up(), lambda k: k.runs.plan_up(), None),
    "plan_down": (_up, lambda k: k.plan_down(), lambda k: k.runs.plan_down(), None),
    "baseline": (
        _nothing,
        lambda k: k.baseline(to=N),
        lambda k: k.runs.baseline(to=N),
        None,
    ),
    "create": (
        _nothing,
        lambda k: k.create("hello"),
        lambda k: k.runs.create("hello"),
        lambda path: path.name.split("_", 1)[1],
    ),
    "inspect_lock": (_up, lambda k: k.inspect_lock(), lambda k: k.runs.inspect_lock(), None),
    "converge": (_nothing, lambda k: k.converge(), lambda k: k.runs.converge(), None),
    "converge_log": (_nothing, lambda k: k.converge_log(), kit_json.converge_log, None),
    "audit": (_up, lambda k: k.audit(), lambda k: k.runs.audit(), None),
    "on": (
        _nothing,
        lambda k: k.on("*", print),
        lambda k: k.background.on("*", print),
        callable,
    ),
    "coordinate_background": (
        _up,
        lambda k: k.coordinate_background(N),
        lambda k: k.background.coordinate(N),
        None,
    ),
    "run_background_slice": (
        _coordinated,
        lambda k: k.run_background_slice(N),
        lambda k: k.background.run_slice(N),
        None,
    ),
    "run_background": (
        _up,
        lambda k: k.run_background(N, concurrency=2),
        lambda k: kit_json.run(k, N, concurrency=2),
        None,
    ),
    "runnable_background": (_up, lambda k: k.runnable_background(), kit_json.runnable, None),
    "stalled_background": (
        _up,
        lambda k: k.stalled_background(),
        lambda k: k.background.stalled(),
        None,
    ),
    "background_status": (
        _ran,
        lambda k: k.background_status(N),
        lambda k: kit_json.status(k, N),
        None,
    ),
    "background_status_view": (
        _up,
        lambda k: k.background_status_view(N),
        lambda k: k.background.status(N),
        None,
    ),
    "background_status_views": (
        _up,
        lambda k: k.background_status_views(),
        lambda k: k.background.statuses(),
        None,
    ),
    "background_names": (
        _up,
        lambda k: k.background_names(),
        lambda k: k.background.names(),
        None,
    ),
    "background_partitions": (
        _ran,
        lambda k: k.background_partitions(N),
        lambda k: kit_json.partitions(k, N),
        None,
    ),
    "background_history": (
        _paused,
        lambda k: k.background_history(N),
        lambda k: kit_json.history(k, N),
        None,
    ),
    "control_background": (
        _up,
        lambda k: k.control_background(N, "pause", actor="ana", reason="peak"),
        lambda k: k.background.control(N, "pause", requested_by="ana", reason="peak"),
        None,
    ),
    "pause_background": (
        _up,
        lambda k: k.pause_background(N, requested_by="ana"),
        lambda k: k.background.control(N, "pause", requested_by="ana"),
        None,
    ),
    "resume_background": (
        _paused,
        lambda k: k.resume_background(N, reason="quiet"),
        lambda k: k.background.control(N, "resume", reason="quiet"),
        None,
    ),
    "cancel_background": (
        _up,
        lambda k: k.cancel_background(N),
        lambda k: k.background.control(N, "cancel"),
        None,
    ),
    "retry_background": (
        _cancelled,
        lambda k: k.retry_background(N, from_start=True),
        lambda k: k.background.control(N, "retry_from_start"),
        None,
    ),
    "repin_background": (
        _up,
        lambda k: k.repin_background(N),
        lambda k: k.background.control(N, "repin"),
        None,
    ),
    "unlock_background": (
        _up,
        lambda k: k.unlock_background(N, requested_by="ops"),
        lambda k: kit_json.unlock(k, N, requested_by="ops"),
        None,
    ),
    "dry_run_background": (
        _up,
        lambda k: k.dry_run_background(N, first=5),
        lambda k: k.background.dry_run(N, first=5),
        None,
    ),
    "audit_background": (
        _up,
        lambda k: k.audit_background(),
        lambda k: k.background.audit(),
        None,
    ),
    "verify_background": (_ran, lambda k: k.verify_background(), kit_json.verify, None),
    "watch_background": (
        _nothing,
        lambda k: k.watch_background(),
        lambda k: k.drift.watch(),
        _stopped,
    ),
    "background_watch_status": (
        _nothing,
        lambda k: k.background_watch_status(),
        kit_json.watch_status,
        None,
    ),
    "runner": (_nothing, lambda k: k.runner, lambda k: k._runner, _kind),
    "runtime": (_nothing, lambda k: k.runtime, lambda k: k._runtime, _kind),
}


def test_every_old_name_has_a_case() -> None:
    assert set(CASES) == set(ALIASES)


@pytest.fixture
def twins(
    mongo_uri: str, mongo_client: MongoClient[dict[str, Any]], tmp_path: Path
) -> Iterator[tuple[Migronaut, Migronaut]]:
    """Two kits over two identical databases, each with the split migration on disk."""
    kits = []
    names = [f"t_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    for index, name in enumerate(names):
        migrations = tmp_path / f"m{index}"
        migrations.mkdir()
        write_background(migrations)
        seed_users(mongo_client[name], 300)
        kits.append(make_kit(mongo_uri, mongo_client[name], migrations))
    try:
        yield kits[0], kits[1]
    finally:
        for kit in kits:
            kit.close()
        for name in names:
            mongo_client.drop_database(name)


@pytest.mark.parametrize("old", sorted(CASES))
def test_an_old_name_warns_and_gives_what_it_gave(
    old: str, twins: tuple[Migronaut, Migronaut]
) -> None:
    before, call_old, call_new, shape = CASES[old]
    aliased, current = twins
    before(aliased)
    before(current)
    with pytest.warns(
        DeprecationWarning, match=rf"^Migronaut\.{old} is deprecated.*{ALIASES[old]}"
    ):
        got = _outcome(call_old, aliased, shape)
    assert got == _outcome(call_new, current, shape)


def test_the_dict_names_still_give_dicts(twins: tuple[Migronaut, Migronaut]) -> None:
    kit = twins[0]
    kit.runs.up()
    with pytest.warns(DeprecationWarning):
        assert isinstance(kit.background_status(N), dict)
        assert isinstance(kit.run_background(N), dict)
        assert all(isinstance(row, dict) for row in kit.background_partitions(N))
        assert isinstance(kit.unlock_background(N), dict)
        assert isinstance(kit.verify_background(), dict)


def _outcome(call: Call, kit: Migronaut, shape: Callable[[Any], Any] | None) -> Any:
    try:
        result = call(kit)
    except MigronautError as exc:
        return ("raised", type(exc).__name__, exc.code)
    return _stable(to_json(result if shape is None else shape(result)))


def _stable(value: Any) -> Any:
    """``value`` without the fields bound to a moment, a process or a store id."""
    if isinstance(value, dict):
        return {
            key: _stable(item)
            for key, item in value.items()
            if key not in _VOLATILE and not key.endswith(("_at", "_ms", "_seconds"))
        }
    if isinstance(value, list):
        return [_stable(item) for item in value]
    return value
