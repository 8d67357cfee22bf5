"""The ``ctx.db`` and ``ctx.client`` of a dry run: nothing written through them escapes it.

A transform, a step or a validating batch may write on its own. In a dry run
what it gets is a view over the real handles, not the handles themselves:

- inside the dry run's transaction (``validate``, steps): every operation is
  bound to that transaction's session, which is always aborted — a call made
  without ``session=ctx.session`` gets it all the same; an operation that
  cannot take a session, or another session, is refused;
- outside any transaction (a plain preview): reads go through; anything that
  may write (a write, an index, a command other than a read, an aggregation
  with ``$out`` or ``$merge``, a session of its own) is refused;
- a write to migronaut's own collections (changelog, locks, background state,
  partitions, watch) is refused in both;
- inside the transaction, ``distinct`` on a sharded collection is refused before
  it runs: a mongos cannot run it in a transaction, and the server's own error
  would say less (``Isolation.shard_key_of`` answers which collections are
  sharded; :func:`isolation_of` asks the kit's shard catalog).

A refusal is a :class:`~migronaut_core.errors.DryRunRefusedError` raised from the
call, naming the operation and the collection; the dry run reports it as the
document's (or the step's) error. The views follow pymongo's shapes —
``db.orders``, ``db["orders"]``, ``db.get_collection``, ``with_options``,
``collection.database``, ``db.client`` — so user code runs unchanged. They close
the handles the context gives, not Python: a migration that builds a client of
its own is beyond reach.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pymongo import MongoClient
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.database import Database

from migronaut_core.background.planning.shard import UNKNOWN, ShardKey
from migronaut_core.background.runtime import Runtime
from migronaut_core.errors import DryRunRefusedError

__all__ = ["Isolation", "isolated_client", "isolated_database", "isolation_of"]

#: Collection methods that only read.
_COLLECTION_READS = frozenset(
    {
        "find",
        "find_one",
        "find_raw_batches",
        "aggregate",
        "aggregate_raw_batches",
        "count_documents",
        "estimated_document_count",
        "distinct",
        "list_indexes",
        "index_information",
        "options",
        "list_search_indexes",
        "watch",
    }
)
#: Database methods that only read (``command`` is judged by its command).
_DATABASE_READS = frozenset(
    {"aggregate", "list_collection_names", "list_collections", "dereference", "watch"}
)
#: Client methods that only read; every other client method is refused.
_CLIENT_READS = frozenset({"list_database_names", "list_databases", "server_info"})
#: Commands (lower case) that only read.
_READ_COMMANDS = frozenset(
    {
        "aggregate",
        "buildinfo",
        "collstats",
        "count",
        "dbstats",
        "distinct",
        "find",
        "hello",
        "ismaster",
        "listcollections",
        "listindexes",
        "ping",
    }
)
#: Aggregation stages that write.
_WRITING_STAGES = ("$out", "$merge")

#: Answers a collection's shard key (``database``, ``collection``), None when it is not sharded.
ShardKeyOf = Callable[[str, str], ShardKey | None]


def _unsharded(database: str, collection: str) -> ShardKey | None:
    return None


@dataclass(frozen=True, slots=True)
class Isolation:
    """What a dry run's handles allow.

    :param session: the dry run's transaction (always aborted), or None: reads only.
    :param database: the name of migronaut's database.
    :param reserved: migronaut's own collections in it, never written.
    :param shard_key_of: a collection's shard key, None when it is not sharded
        (default: none is); asked only for a ``distinct`` in the transaction.
    """

    session: ClientSession | None
    database: str
    reserved: frozenset[str]
    shard_key_of: ShardKeyOf = field(default=_unsharded)

    def call(
        self,
        method: Callable[..., Any],
        operation: str,
        target: str,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        *,
        writes: bool,
        reserved: bool = False,
    ) -> Any:
        """Run ``method`` bound to the transaction, or refuse it.

        :param target: what it acts on (``db.collection``), for the error.
        :param writes: whether it may write.
        :param reserved: it writes to one of migronaut's own collections.
        """
        if writes and reserved:
            raise _refused(operation, target, "migronaut's own collections are never written")
        if self.session is None:
            if writes:
                raise _refused(operation, target, "a plain preview only reads (no transaction)")
            return method(*args, **kwargs)
        given = kwargs.get("session")
        if given is not None and given is not self.session:
            raise _refused(operation, target, "ctx.session is the dry run's only session")
        if not _takes_session(method):
            if writes:
                raise _refused(operation, target, "it cannot run in the dry run's transaction")
            return method(*args, **kwargs)
        return method(*args, **{**kwargs, "session": self.session})

    def is_reserved(self, database: str, collection: str | None) -> bool:
        return database == self.database and collection in self.reserved

    def check_distinct(self, database: str, collection: str | None, operation: str) -> None:
        """Refuse a ``distinct`` the transaction cannot run: on a sharded collection.

        :raises DryRunRefusedError: naming the collection (never a value).
        """
        if self.session is None or collection is None:
            return
        if self.shard_key_of(database, collection) is not None:
            raise _refused(
                operation,
                f"{database}.{collection}",
                "a sharded collection's distinct cannot run in a transaction (a mongos "
                "refuses it); read the values with find or aggregate",
            )


def isolation_of(rt: Runtime, session: ClientSession | None) -> Isolation:
    """What a dry run over ``rt`` allows: bound to ``session`` (or reads only), never
    migronaut's own collections; sharded collections as ``rt``'s shard catalog says."""
    return Isolation(session, rt.db.name, rt.own_collections, _catalog_shard_keys(rt))


def _catalog_shard_keys(rt: Runtime) -> ShardKeyOf:
    """Shard keys as the kit's catalog reads them, once per collection and dry run.

    Not behind a mongos, nothing is sharded and ``config`` is never read; a
    catalog that may not read ``config`` knows no shard key (the server then
    speaks for itself).
    """

    @functools.cache
    def shard_key_of(database: str, collection: str) -> ShardKey | None:
        if not rt.shards.is_sharded():
            return None
        sharding = rt.shards.sharding_of(f"{database}.{collection}")
        return None if sharding is None or sharding is UNKNOWN else sharding.key

    return shard_key_of


def isolated_database(db: Database[Any], isolation: Isolation) -> Database[Any]:
    """``db`` as a dry run hands it to user code (typed as the database it stands for)."""
    return cast("Database[Any]", _DatabaseView(db, isolation))


def isolated_client(client: MongoClient[Any], isolation: Isolation) -> MongoClient[Any]:
    """``client`` as a dry run hands it to user code (typed as the client it stands for)."""
    return cast("MongoClient[Any]", _ClientView(client, isolation))


def _refused(operation: str, target: str, why: str) -> DryRunRefusedError:
    return DryRunRefusedError(
        f"dry run: {operation} on {target} is refused: {why}",
        {"operation": operation, "target": target},
    )


def _takes_session(method: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "session" or p.kind is p.VAR_KEYWORD for p in parameters)


def _first(args: Sequence[Any], kwargs: Mapping[str, Any], *names: str) -> Any:
    if args:
        return args[0]
    return next((kwargs[name] for name in names if name in kwargs), None)


def _writes_out(pipeline: Any) -> bool:
    """Whether an aggregation pipeline ends by writing (``$out``, ``$merge``)."""
    if not isinstance(pipeline, Sequence) or isinstance(pipeline, str):
        return False
    return any(
        isinstance(stage, Mapping) and any(k in stage for k in _WRITING_STAGES)
        for stage in pipeline
    )


class _CollectionView:
    """A collection whose every operation is bound to the dry run's transaction, or refused."""

    __slots__ = ("_isolation", "_real")

    def __init__(self, real: Collection[Any], isolation: Isolation) -> None:
        self._real = real
        self._isolation = isolation

    def __getitem__(self, name: str) -> _CollectionView:
        return _CollectionView(self._real[name], self._isolation)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name == "database":
            return _DatabaseView(self._real.database, self._isolation)
        if name == "with_options":
            return self._with_options
        declared = getattr(type(self._real), name, None)
        if declared is None:
            return self[name]  # pymongo: ``collection.sub`` is the sub-collection
        if not callable(declared):
            return getattr(self._real, name)
        return self._bound(name, getattr(self._real, name))

    def _with_options(self, *args: Any, **kwargs: Any) -> _CollectionView:
        """``collection.with_options(...)`` that stays bound to the dry run."""
        return _CollectionView(self._real.with_options(*args, **kwargs), self._isolation)

    def _bound(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        real, isolation = self._real, self._isolation

        def call(*args: Any, **kwargs: Any) -> Any:
            if name == "distinct":
                isolation.check_distinct(real.database.name, real.name, name)
            writes = name not in _COLLECTION_READS or (
                name.startswith("aggregate") and _writes_out(_first(args, kwargs, "pipeline"))
            )
            reserved = isolation.is_reserved(real.database.name, real.name)
            return isolation.call(
                method, name, real.full_name, args, kwargs, writes=writes, reserved=reserved
            )

        return call

    def __repr__(self) -> str:
        return f"DryRunCollection({self._real.full_name!r})"


class _DatabaseView:
    """A database whose collections and commands are bound to the dry run, or refused."""

    __slots__ = ("_isolation", "_real")

    def __init__(self, real: Database[Any], isolation: Isolation) -> None:
        self._real = real
        self._isolation = isolation

    def __getitem__(self, name: str) -> _CollectionView:
        return _CollectionView(self._real[name], self._isolation)

    def get_collection(self, name: str, *args: Any, **kwargs: Any) -> _CollectionView:
        return _CollectionView(self._real.get_collection(name, *args, **kwargs), self._isolation)

    def with_options(self, *args: Any, **kwargs: Any) -> _DatabaseView:
        return _DatabaseView(self._real.with_options(*args, **kwargs), self._isolation)

    @property
    def client(self) -> _ClientView:
        return _ClientView(self._real.client, self._isolation)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        declared = getattr(type(self._real), name, None)
        if declared is None:
            return self[name]  # pymongo: ``db.orders`` is the collection
        if not callable(declared):
            return getattr(self._real, name)
        return self._bound(name, getattr(self._real, name))

    def _bound(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        real, isolation = self._real, self._isolation

        def call(*args: Any, **kwargs: Any) -> Any:
            target, writes = self._judged(name, args, kwargs)
            if name in ("command", "cursor_command") and _verb(args, kwargs) == "distinct":
                isolation.check_distinct(real.name, target, "distinct")
            reserved = isolation.is_reserved(real.name, target)
            where = f"{real.name}.{target}" if target else real.name
            return isolation.call(
                method, name, where, args, kwargs, writes=writes, reserved=reserved
            )

        return call

    @staticmethod
    def _judged(
        name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[str | None, bool]:
        """The collection a database method acts on, and whether it may write."""
        if name in ("command", "cursor_command"):
            return _judged_command(args, kwargs)
        if name in _DATABASE_READS:
            return None, name == "aggregate" and _writes_out(_first(args, kwargs, "pipeline"))
        named = _first(args, kwargs, "name", "name_or_collection")
        target = named.name if isinstance(named, Collection) else named
        return (target if isinstance(target, str) else None), True

    def __repr__(self) -> str:
        return f"DryRunDatabase({self._real.name!r})"


def _verb(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """A command's name, lower case (None when it is not a command at all)."""
    command = _first(args, kwargs, "command")
    if isinstance(command, str):
        return command.lower()
    if isinstance(command, Mapping) and command:
        return str(next(iter(command))).lower()
    return None


def _judged_command(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str | None, bool]:
    """A command's collection (its first value, when a name) and whether it may write."""
    command = _first(args, kwargs, "command")
    if isinstance(command, str):
        value = args[1] if len(args) > 1 else kwargs.get("value")
        verb, target, pipeline = command, value, kwargs.get("pipeline")
    elif isinstance(command, Mapping) and command:
        verb, target = next(iter(command.items()))
        pipeline = command.get("pipeline")
    else:
        return None, True
    writes = str(verb).lower() not in _READ_COMMANDS or _writes_out(pipeline)
    return (target if isinstance(target, str) else None), writes


class _ClientView:
    """A client that hands out isolated databases; reads of its own, nothing else."""

    __slots__ = ("_isolation", "_real")

    def __init__(self, real: MongoClient[Any], isolation: Isolation) -> None:
        self._real = real
        self._isolation = isolation

    def __getitem__(self, name: str) -> _DatabaseView:
        return _DatabaseView(self._real[name], self._isolation)

    def get_database(self, name: str | None = None, *args: Any, **kwargs: Any) -> _DatabaseView:
        return _DatabaseView(self._real.get_database(name, *args, **kwargs), self._isolation)

    def get_default_database(self, *args: Any, **kwargs: Any) -> _DatabaseView:
        return _DatabaseView(self._real.get_default_database(*args, **kwargs), self._isolation)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        declared = getattr(type(self._real), name, None)
        if declared is None:
            return self[name]  # pymongo: ``client.shop`` is the database
        if not callable(declared):
            return getattr(self._real, name)
        method = getattr(self._real, name)
        isolation = self._isolation

        def call(*args: Any, **kwargs: Any) -> Any:
            if name not in _CLIENT_READS:
                raise _refused(name, "the client", "only reads and databases are handed out")
            return isolation.call(method, name, "the client", args, kwargs, writes=False)

        return call

    def __repr__(self) -> str:
        return "DryRunClient()"
