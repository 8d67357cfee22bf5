"""``*_view`` names a typed view; the functions returning JSON are ``*_json``, the old names
still work and warn."""

from __future__ import annotations

from typing import Any, cast

import pytest

from migronaut_core.background import views
from migronaut_core.background.store import BackgroundStore

STATE: dict[str, Any] = {
    "_id": "20260101_split",
    "status": "pending",
    "generation": 1,
    "plan": {"token": "secret", "estimate": 3},
    "history": [{"action": "pause", "by": "ann"}],
}
PARTITION: dict[str, Any] = {"_id": "p", "status": "pending", "lease": {"owner": "o"}}


class Partitions:
    def list_partitions(self, name: str, *, generation: int) -> list[dict[str, Any]]:
        return [PARTITION]


class Leases:
    def live_leases(self, name: str) -> int:
        return 0


class Store:
    """The two reads a status view makes of the store (its partitions and its leases)."""

    partitions = Partitions()
    leases = Leases()


STORE = cast("BackgroundStore", Store())


@pytest.mark.parametrize(
    ("old", "new", "arguments"),
    [
        ("state_view", "status_json", (STORE, STATE)),
        ("partition_view", "partition_json", (PARTITION,)),
        ("history_view", "history_json", (STATE,)),
        ("sharding_view", "sharding_json", (STATE,)),
    ],
)
def test_the_old_names_warn_and_answer_as_the_new(
    old: str, new: str, arguments: tuple[Any, ...]
) -> None:
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated.*use {new}"):
        answered = getattr(views, old)(*arguments)
    assert answered == getattr(views, new)(*arguments)


def test_a_view_is_typed_and_its_json_is_its_to_dict() -> None:
    view = views.status_view(STORE, STATE)
    assert isinstance(view, views.BackgroundStatusView)
    assert views.status_json(STORE, STATE) == view.to_dict()
    assert "token" not in view.to_dict()["plan"]
