"""Inline mode's ``BackgroundPendingError`` carries ``migration`` and ``waits_for`` (L-21b)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import BackgroundPendingError
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.runner import write_migration

ORDERS = "20240102000000_orders_v2"
AFTER_ORDERS = "20240103000000_drop_legacy"


def test_inline_mode_names_what_a_requirement_still_waits_for(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 20)
    db.orders.insert_many([{"_id": i, "_v": 1} for i in range(10)])
    write_background(migrations)
    write_background(
        migrations,
        ORDERS,
        body=f"""
        requires = ["{SPLIT_NAME}"]
        background = {{"collection": "orders", "from": 1, "to": 2}}

        def migrate(doc, ctx):
            return {{**doc, "total": 0}}
        """,
    )
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()  # SPLIT_NAME pending, ORDERS blocked on it
        kit.background.control(SPLIT_NAME, "pause")
    write_migration(
        migrations, AFTER_ORDERS, f"requires = ['{ORDERS}']\n\ndef up(ctx):\n    pass\n"
    )

    # Inline, the paused requirement cannot be driven to the end: ORDERS stays blocked.
    with (
        make_kit(mongo_uri, db, migrations, background_inline=True) as kit,
        pytest.raises(BackgroundPendingError) as raised,
    ):
        kit.runs.up()

    assert raised.value.context == {
        "migration": ORDERS,
        "waits_for": [{"migration": SPLIT_NAME, "status": "paused"}],
    }
