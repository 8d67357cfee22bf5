"""What the coordinator, lanes and controls run with: one object per kit.

It holds the database handles, the store, the event hub, the telemetry, the
loader of migration files and the kit's caches: index keys, warnings said once,
and the throttle state its lanes share (adaptive controllers, lag probes), which
:meth:`Runtime.forget_migration` frees when a migration ends. Nothing of it is
process-wide: two kits in one process share none of it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import PyMongoError

from migronaut_core.background.events import Events
from migronaut_core.background.planning.shard import ShardCatalog
from migronaut_core.background.spec import BackgroundFunctions, BackgroundSpec
from migronaut_core.background.store import BackgroundStore
from migronaut_core.background.telemetry import NO_TELEMETRY, Telemetry
from migronaut_core.background.throttle.budget import TargetBudget
from migronaut_core.background.throttle.health import oplog_headroom_key
from migronaut_core.background.throttle.pacing import warning_keys
from migronaut_core.background.throttle.registry import ThrottleRegistry
from migronaut_core.background.warn_once import WarnOnce
from migronaut_core.clock import monotonic, utc_now
from migronaut_core.deployment import supports_transactions
from migronaut_core.lock import MongoLock
from migronaut_core.windows import Window

log = logging.getLogger("migronaut_core.background")

#: How long a collection's index keys are reused: indexes change on a deploy, not a batch.
INDEX_CACHE_SECONDS = 30.0
#: MongoDB 5.0's wire version: ``$unsetField``, which guarded pipelines need.
PIPELINE_GUARD_WIRE_VERSION = 13


@dataclass(frozen=True, slots=True)
class LoadedBackground:
    """A background migration file, resolved: its spec, functions and checksum."""

    name: str
    spec: BackgroundSpec
    fns: BackgroundFunctions
    checksum: str
    requires: tuple[str, ...] = ()
    description: str | None = None


class Loader(Protocol):
    """Loads a background migration file by name.

    ``tolerant``: for a registered migration, whose stored spec stands —
    collection definitions that do not load are warned about and passed over.
    """

    def __call__(self, name: str, *, tolerant: bool = False) -> LoadedBackground: ...


@dataclass
class Runtime:
    """The wiring of the background engine inside one kit (one process)."""

    db: Database[dict[str, Any]]
    client: MongoClient[dict[str, Any]]
    store: BackgroundStore
    events: Events
    load: Loader
    lock_collection: str
    ttl_seconds: float
    on_completed: Callable[[str], None] | None = None
    #: Which of these names the changelog records as adopted (``migronaut baseline``):
    #: an adopted background migration has no state and counts as completed.
    adopted_of: Callable[[Sequence[str]], Collection[str]] | None = None
    #: Where shard keys and chunks are read (built from ``client`` when not given).
    catalog: ShardCatalog | None = None
    #: ``auto``: split sharded collections along their shard key; ``off``: by ``_id``.
    shard_aware: str = "auto"
    #: Spans and metrics: the kit passes its own (OpenTelemetry's global providers
    #: unless it was given others); a runtime built without a kit reports nothing.
    telemetry: Telemetry = NO_TELEMETRY
    #: Every collection migronaut keeps its own records in (the config's
    #: ``bookkeeping_collections``); no migration writes to them.
    bookkeeping: tuple[str, ...] = ()
    #: Documents per second every migration of the target shares (``background_budget``).
    budget_rate: int | None = None
    #: The target's maintenance windows (``background_windows``), for every
    #: migration whose spec sets no ``windows`` of its own; empty: always open.
    windows: tuple[Window, ...] = ()
    #: The wall clock windows are judged on: the one seam tests move time through.
    wall_clock: Callable[[], datetime] = utc_now
    #: Warnings said once per kit: ``rt.warn_once(key, message, *args)``.
    warn_once: WarnOnce = field(default_factory=lambda: WarnOnce(log), init=False)
    #: The adaptive controllers and lag probes this kit's lanes share.
    throttles: ThrottleRegistry = field(default_factory=ThrottleRegistry, init=False)
    #: The target's write budget and brake, as this kit's lanes meet them.
    budget: TargetBudget = field(init=False)
    _index_cache: dict[str, tuple[float, list[dict[str, Any]]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _transactions: bool | None = None
    _pipeline_guard: bool | None = None

    def __post_init__(self) -> None:
        self.budget = TargetBudget(self.store.budget, self.budget_rate)
        if self.catalog is None:
            self.catalog = ShardCatalog(self.client)

    @property
    def shards(self) -> ShardCatalog:
        """The cluster's shard metadata reader."""
        assert self.catalog is not None  # set by __post_init__
        return self.catalog

    @property
    def own_collections(self) -> frozenset[str]:
        """migronaut's own collections in :attr:`db`: the store's, the locks', the rest."""
        store = (
            self.store.states.collection.name,
            self.store.partitions.collection.name,
            self.lock_collection,
        )
        return frozenset((*self.bookkeeping, *store))

    @property
    def ttl_ms(self) -> int:
        return int(self.ttl_seconds * 1000)

    def lock_for(self, name: str) -> MongoLock:
        """The coordinator lock of one background migration (held one step at a time)."""
        return MongoLock(
            self.db[self.lock_collection],
            f"background:{name}",
            self.ttl_seconds,
            label="background coordinator lock",
        )

    def windows_of(self, spec: BackgroundSpec) -> tuple[Window, ...]:
        """The windows a migration's lanes keep: its spec's own, else the target's."""
        return self.windows if spec.windows is None else spec.windows

    def emit(self, event: str, payload: Mapping[str, Any]) -> None:
        self.events.emit(event, dict(payload))

    def index_keys(self, collection: str) -> list[dict[str, Any]]:
        """The key patterns of a collection's indexes (none when it does not exist)."""
        now = monotonic()
        with self._lock:
            hit = self._index_cache.get(collection)
        if hit is not None and now - hit[0] < INDEX_CACHE_SECONDS:
            return hit[1]
        try:
            keys = [dict(index["key"]) for index in self.db[collection].list_indexes()]
        except PyMongoError:
            return []
        with self._lock:
            self._index_cache[collection] = (now, keys)
        return keys

    def supports_transactions(self) -> bool:
        """Whether the deployment runs multi-document transactions (asked once)."""
        if self._transactions is None:
            self._transactions = supports_transactions(self.client)
        return self._transactions

    def supports_pipeline_guard(self) -> bool:
        """Whether guarded writes can be ``_id``-keyed pipelines (MongoDB 5.0+; asked once)."""
        if self._pipeline_guard is None:
            hello = self.client.admin.command("hello")
            self._pipeline_guard = (
                int(hello.get("maxWireVersion", 0)) >= PIPELINE_GUARD_WIRE_VERSION
            )
        return self._pipeline_guard

    def forget_indexes(self, collection: str) -> None:
        """Read a collection's indexes afresh next time, and warn about them again."""
        with self._lock:
            self._index_cache.pop(collection, None)
        self.warn_once.forget(lambda key: key.endswith(f":{collection}"))

    def forget_migration(self, name: str) -> None:
        """Free what this kit kept for a migration that ended (completed, failed, cancelled).

        Its adaptive controllers go (a later run resumes from the state stored on
        its partitions) and its throttle and oplog-headroom warnings may be said again.
        """
        self.throttles.forget(name)
        said_again = warning_keys(name) | {oplog_headroom_key(name)}
        self.warn_once.forget(said_again.__contains__)
