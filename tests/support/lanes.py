"""Documents and log capture shared by the lanes trigger and sensor tests.

:func:`seed_state` and :func:`seed_partition` write what the coordinator leaves for
migration :data:`NAME` while its lanes run; :func:`captured_logs` records Airflow's
structlog entries whatever the configured level.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog
from pymongo.database import Database
from structlog.testing import capture_logs

from migronaut_core.config import BackgroundCollections

NAME = "m_lanes"
PLAN = "plan-a"
NAMES = BackgroundCollections.from_prefix("migronaut_background")

Document = dict[str, Any]


def seed_state(
    db: Database[Document], *, status: str = "running", generation: int = 1, plan: str = PLAN
) -> None:
    """A state document of ``NAME`` as the coordinator leaves it while lanes run."""
    db[NAMES.state].insert_one(
        {"_id": NAME, "status": status, "generation": generation, "plan": {"token": plan}}
    )


def seed_partition(
    db: Database[Document],
    *,
    status: str = "pending",
    generation: int = 1,
    plan: str = PLAN,
    lease: str | None = None,
) -> None:
    """A partition of ``NAME``; ``lease`` is ``"live"``, ``"expired"`` or None."""
    inserted = db[NAMES.partitions].insert_one(
        {"migration": NAME, "generation": generation, "plan": plan, "status": status}
    )
    if lease == "live":
        db[NAMES.partitions].update_one(
            {"_id": inserted.inserted_id},
            {
                "$set": {"lease.ttl_ms": 60_000, "lease.slot": 0, "lease.token": "t"},
                "$currentDate": {"lease.renewed_at": True},
            },
        )
    elif lease == "expired":
        long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)
        db[NAMES.partitions].update_one(
            {"_id": inserted.inserted_id},
            {"$set": {"lease": {"ttl_ms": 1_000, "slot": 1, "token": "t", "renewed_at": long_ago}}},
        )


@contextmanager
def captured_logs() -> Iterator[list[dict[str, Any]]]:
    """Capture every structlog entry (Airflow's loggers), whatever the configured level."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs() as entries:
            yield entries
    finally:
        structlog.configure(**saved)


def logged_text(entries: list[dict[str, Any]]) -> str:
    return "\n".join(str(entry.get("event")) for entry in entries)


def seed_hold(db: Database[Document], hold: str) -> None:
    """Put a hold on :data:`NAME`'s state, as held lanes leave it.

    ``"window"``: waiting for a window that opens in an hour (confirmed 10 min
    ago); ``"health"``: a health hold confirmed just now; ``"stale-health"``: one
    nobody has confirmed for 10 minutes (its lanes are gone).
    """
    now = dt.datetime.now(dt.UTC)
    long_ago = now - dt.timedelta(minutes=10)
    documents: dict[str, Document] = {
        "window": {
            "reason": "window",
            "until": now + dt.timedelta(hours=1),
            "since": long_ago,
            "at": long_ago,
        },
        "health": {"reason": "health", "signal": "cache_used", "since": long_ago, "at": now},
        "stale-health": {
            "reason": "health",
            "signal": "cache_used",
            "since": long_ago,
            "at": long_ago,
        },
    }
    db[NAMES.state].update_one({"_id": NAME}, {"$set": {"hold": documents[hold]}})
