"""A lock in MongoDB with a time-to-live, a heartbeat and a fencing token.

One document per lock in the lock collection (``_id`` is the lock's name).
Taking it is a single conditional upsert, so two processes racing for a free lock
cannot both win: the loser's upsert collides on ``_id``. Expiry is judged by the
server's clock (``$$NOW``), never the client's, so clock skew between machines
cannot hand a live lock to someone else. Each acquisition increments ``token``
(the fencing token); a holder proves it still holds the lock by matching its
owner id *and* token, so a holder that stalled past its TTL and lost the lock to
another process can no longer renew or release it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any

from pymongo import ReturnDocument
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.errors import DuplicateKeyError, PyMongoError

from migronaut_core.clock import monotonic
from migronaut_core.errors import LockAlreadyHeldError, LockLostError
from migronaut_core.json_shape import json_field, to_json_dict

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1)
#: Free: never taken, released, or expired by the server's clock.
_IS_FREE = {"$lte": [{"$ifNull": ["$expires_at", _EPOCH]}, "$$NOW"]}


@dataclass(frozen=True, slots=True)
class LockInfo:
    """Who holds a lock, as stored (the owner id is not a secret but is not shown)."""

    name: str
    token: int
    host: str | None
    pid: int | None
    requested_by: str | None
    acquired_at: datetime | None = field(metadata=json_field(time="isoformat"))
    expires_at: datetime = field(metadata=json_field(time="isoformat"))
    held: bool

    @property
    def stale(self) -> bool:
        """Not held, yet never released: its holder stopped renewing it (a killed run)."""
        return not self.held and self.expires_at.replace(tzinfo=None) > _EPOCH

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


class MongoLock:
    """A named lock with TTL; use as a context manager to hold it with a heartbeat.

    :param collection: the lock collection.
    :param name: the lock's id, e.g. ``"migrations"`` or ``"background:<name>"``.
    :param ttl_seconds: how long the lock survives without a renewal.
    :param requested_by: recorded with the holder, for ``inspect``.
    :param label: how errors call this lock ("migration lock").
    """

    def __init__(
        self,
        collection: Collection[dict[str, Any]],
        name: str,
        ttl_seconds: float,
        *,
        requested_by: str | None = None,
        label: str = "lock",
    ) -> None:
        self._collection = collection
        self.name = name
        self.ttl_ms = int(ttl_seconds * 1000)
        self.label = label
        self.owner = uuid.uuid4().hex
        self.token: int | None = None
        self._holder = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "requested_by": requested_by,
        }
        self._heartbeat: _Heartbeat | None = None
        self._on_lost: list[Callable[[], None]] = []
        self._on_lost_guard = threading.Lock()

    # -- acquiring -----------------------------------------------------------------

    def try_acquire(self) -> bool:
        """Take the lock if it is free or expired; return whether we hold it now.

        One pipeline update on ``_id`` decides and writes atomically: when the lock
        is taken and alive, every field keeps its value and the owner stays the
        other holder's.
        """
        taken = {
            "owner": self.owner,
            "token": {"$add": [{"$ifNull": ["$token", 0]}, 1]},
            "holder": {"$literal": self._holder},
            "acquired_at": "$$NOW",
            "renewed_at": "$$NOW",
            "expires_at": {"$add": ["$$NOW", self.ttl_ms]},
        }
        try:
            doc = self._update_if_free(taken)
        except DuplicateKeyError:
            # Two first-ever upserts raced; the loser sees the winner's lock now.
            doc = self._update_if_free(taken)
        if doc is None or doc.get("owner") != self.owner:
            return False
        self.token = int(doc["token"])
        return True

    def _update_if_free(self, taken: dict[str, Any]) -> dict[str, Any] | None:
        return self._collection.find_one_and_update(
            {"_id": self.name},
            [
                {"$set": {"_free": _IS_FREE}},
                {
                    "$set": {
                        key: {"$cond": ["$_free", value, f"${key}"]} for key, value in taken.items()
                    }
                },
                {"$unset": "_free"},
            ],
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )

    def acquire(
        self,
        *,
        wait_seconds: float = 0,
        poll_seconds: float = 0.5,
        cancel: threading.Event | None = None,
    ) -> int:
        """Take the lock, waiting up to ``wait_seconds`` for it; return the fencing token.

        :raises LockAlreadyHeldError: still held by someone else when the wait ends.
        """
        stop = cancel or threading.Event()
        deadline = monotonic() + max(wait_seconds, 0)
        while True:
            if self.try_acquire():
                assert self.token is not None
                return self.token
            remaining = deadline - monotonic()
            if remaining <= 0 or stop.is_set():
                raise self._held_error()
            stop.wait(min(poll_seconds, remaining))

    def _held_error(self) -> LockAlreadyHeldError:
        info = self.inspect()
        holder = info.to_dict() if info else {}
        who = f" by {info.requested_by or 'pid ' + str(info.pid)} on {info.host}" if info else ""
        until = f" until {info.expires_at.isoformat()} unless renewed" if info else ""
        return LockAlreadyHeldError(
            f"the {self.label} is held{who}{until}; wait for that run to finish, or "
            "retry with a wait",
            {"lock": self.name, "holder": holder},
        )

    # -- holding ---------------------------------------------------------------------

    def _fence(self) -> dict[str, Any]:
        return {"_id": self.name, "owner": self.owner, "token": self.token}

    def renew(self, *, session: ClientSession | None = None) -> bool:
        """Extend the TTL; False when the lock was lost (taken over or force-released)."""
        if self.token is None:
            return False
        result = self._collection.update_one(
            self._fence(),
            [{"$set": {"renewed_at": "$$NOW", "expires_at": {"$add": ["$$NOW", self.ttl_ms]}}}],
            session=session,
        )
        return result.matched_count == 1

    def assert_held(self, *, session: ClientSession | None = None) -> None:
        """Renew the lock or raise :class:`LockLostError`.

        Inside a transaction (``session``) the renewal is part of it: a takeover
        that happens concurrently makes the transaction fail instead of commit.
        """
        if self._heartbeat is not None and self._heartbeat.lost.is_set():
            raise self._lost_error()
        if not self.renew(session=session):
            raise self._lost_error()

    def _lost_error(self) -> LockLostError:
        return LockLostError(
            f"the {self.label} was lost (it expired or was taken over); stopping before "
            "writing anything else",
            {"lock": self.name, "token": self.token},
        )

    @property
    def lost(self) -> bool:
        return self._heartbeat is not None and self._heartbeat.lost.is_set()

    def on_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the heartbeat finds the lock lost (at once if it has).

        The holder's work stops at its next check instead of running to its
        end unguarded: a lock that lapsed or was taken over protects nothing.
        Called from the heartbeat's thread: it must be quick and must not raise.
        """
        with self._on_lost_guard:
            self._on_lost.append(callback)
        if self.lost:
            callback()

    def _lost_found(self) -> None:
        with self._on_lost_guard:
            callbacks = list(self._on_lost)
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("a callback of the lost %s %s raised; ignored", self.label, self.name)

    def release(self) -> bool:
        """Give the lock up; keeps the document so tokens stay monotonic."""
        if self.token is None:
            return False
        result = self._collection.update_one(
            self._fence(), {"$set": {"expires_at": _EPOCH, "owner": None}}
        )
        self.token = None
        return result.modified_count == 1

    def force_release(self) -> LockInfo | None:
        """Break the lock whoever holds it (an operator's ``unlock``); return who held it."""
        before = self._collection.find_one_and_update(
            {"_id": self.name}, {"$set": {"expires_at": _EPOCH, "owner": None}}
        )
        if before is None:
            return None
        info = _info(before, held=before.get("owner") is not None)
        return info if info.held else None

    def inspect(self) -> LockInfo | None:
        """Return the lock's holder as the server sees it now, or None if never taken."""
        docs = list(
            self._collection.aggregate(
                [
                    {"$match": {"_id": self.name}},
                    {"$addFields": {"held": {"$gt": ["$expires_at", "$$NOW"]}}},
                ]
            )
        )
        return _info(docs[0], held=bool(docs[0]["held"])) if docs else None

    # -- context manager with heartbeat ------------------------------------------------

    def start_heartbeat(self) -> None:
        """Renew in the background every third of the TTL until released."""
        self._heartbeat = _Heartbeat(self, interval=self.ttl_ms / 3000)
        self._heartbeat.start()

    def stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None

    def __enter__(self) -> MongoLock:
        if self.token is None:
            self.acquire()
        self.start_heartbeat()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_heartbeat()
        try:
            self.release()
        except PyMongoError:
            log.warning("could not release %s %s; it expires by itself", self.label, self.name)


class _Heartbeat(threading.Thread):
    def __init__(self, lock: MongoLock, interval: float) -> None:
        super().__init__(name=f"migronaut-heartbeat-{lock.name}", daemon=True)
        self._lock = lock
        self._interval = interval
        self._stopped = threading.Event()
        self.lost = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                if not self._lock.renew():
                    log.warning("%s %s lost", self._lock.label, self._lock.name)
                    self.lost.set()
                    self._lock._lost_found()
                    return
            except PyMongoError as exc:
                # A blip is survivable: the TTL covers two more attempts.
                log.warning(
                    "renewing %s failed (%s); retrying", self._lock.label, type(exc).__name__
                )

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=5)


def _info(doc: dict[str, Any], *, held: bool) -> LockInfo:
    holder = doc.get("holder") or {}
    return LockInfo(
        name=doc["_id"],
        token=int(doc.get("token", 0)),
        host=holder.get("host"),
        pid=holder.get("pid"),
        requested_by=holder.get("requested_by"),
        acquired_at=doc.get("acquired_at"),
        expires_at=doc.get("expires_at", _EPOCH),
        held=held,
    )
