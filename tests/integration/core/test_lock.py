"""A lock's ``on_lost`` callbacks: how a holder's work learns its lock is gone (A-13b)."""

from __future__ import annotations

import threading
from typing import Any

from pymongo.database import Database

from migronaut_core.lock import MongoLock


def test_on_lost_callbacks_fire_once_the_heartbeat_finds_the_lock_gone(
    db: Database[dict[str, Any]],
) -> None:
    lock = MongoLock(db.migronaut_lock, "background:x", ttl_seconds=0.3)
    lost = threading.Event()
    late: list[str] = []
    lock.on_lost(lost.set)
    with lock:
        assert not lost.wait(0.3)  # renewed: still held
        MongoLock(db.migronaut_lock, "background:x", ttl_seconds=0.3).force_release()
        assert lost.wait(5)
        assert lock.lost
        lock.on_lost(lambda: late.append("called"))  # registered after the loss: at once
    assert late == ["called"]
