"""What a partitioner is, and the values it hands the coordinator and the batch engine.

The :class:`Partitioner` protocol is all the coordinator and the batch engine
know of a partitioner: it makes a :class:`Plan` (a list of BSON-ready
*scopes*, each stored on a partition document and worked by one lane at a
time), turns a scope and a lane's cursor into a :class:`BatchQuery`, moves the
cursor on, adds conditions to each guarded write and may refuse a transformed
document (a :class:`Refusal`). :func:`find` runs a :class:`BatchQuery`.
Implementations: :class:`~.id_range.IdRangePartitioner` here and the
shard-aware ones in :mod:`~migronaut_core.background.planning.shard`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from migronaut_core.background.spec import PartitionSettings

if TYPE_CHECKING:
    from pymongo.client_session import ClientSession
    from pymongo.collection import Collection

__all__ = ["BatchQuery", "Partitioner", "Plan", "Refusal", "Scope", "find", "hint_document"]

#: A partition's scope, as stored on its partition document (BSON-ready).
Scope = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Plan:
    """The partitions of one pass, and what planning them learned.

    :param method: ``empty`` (nothing matches), ``single`` (one ``all``
        partition) or ``sample`` (ranges cut at sampled ``_id``s).
    :param estimate: matching documents counted (capped: see ``at_least``), or
        estimated from a sample (see ``approximate``).
    :param at_least: the count stopped at its cap; ``estimate`` is a floor.
    :param partitions: one BSON-ready scope per partition; together they reach
        every matching document exactly once.
    :param degraded: why the plan is coarser than asked (``sample-timeout``,
        ``count-timeout``), else ``None``.
    :param epoch: what the plan depends on (``None``: nothing that can change).
    :param approximate: ``estimate`` is the collection's size times the share of
        a random sample that matched, not a count.
    """

    method: str
    estimate: int
    at_least: bool
    partitions: list[Scope]
    degraded: str | None
    epoch: Any = None
    approximate: bool = False


@dataclass(frozen=True, slots=True)
class BatchQuery:
    """One batch read: ``filter`` sorted by ``sort``, at most ``limit``, through ``hint``.

    ``min`` and ``max`` (both or neither) bound the scan of the hinted index
    (inclusive, exclusive), as the shard-aware partitioner reads a chunk range;
    an empty ``sort`` reads in the index's order.
    """

    filter: dict[str, Any]
    sort: list[tuple[str, int]]
    limit: int
    hint: Any | None
    min: dict[str, Any] | None = None
    max: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a partitioner refuses a transformed document (recorded as a document error).

    :param reason: a short stable code.
    :param message: for a person; never contains document values.
    """

    reason: str
    message: str


def hint_document(hint: Any) -> str | dict[str, Any]:
    """Return ``hint`` (a name, a mapping or ``(key, direction)`` pairs) as a command accepts it."""
    if isinstance(hint, str):
        return hint
    if isinstance(hint, Mapping):
        return dict(hint)
    return {key: direction for key, direction in hint}


def find(
    collection: Collection[Any],
    query: BatchQuery,
    *,
    session: ClientSession | None = None,
    max_time_ms: int | None = None,
    projection: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Run ``query`` on ``collection`` and return the whole batch, in ``_id`` order.

    :param session: read inside this session (a transaction's, say).
    :param projection: the fields to return (``{"_id": 1}``: a covered read
        through the hinted version index when the filter tests only it).
    :param max_time_ms: the server's time limit for the read.
    """
    # One round trip for the whole batch (the server's default first batch is 101).
    options: dict[str, Any] = {
        "sort": query.sort,
        "limit": query.limit,
        "batch_size": query.limit,
        "session": session,
    }
    if not query.sort:
        del options["sort"]
    if query.hint is not None:
        options["hint"] = hint_document(query.hint)
    if query.min is not None and query.max is not None:
        options["min"] = query.min
        options["max"] = query.max
    if max_time_ms is not None:
        options["max_time_ms"] = max_time_ms
    if projection is not None:
        options["projection"] = dict(projection)
    return list(collection.find(query.filter, **options))


class Partitioner(Protocol):
    """What the coordinator and the batch engine need of a partitioner."""

    @property
    def id(self) -> str:
        """The name a plan records."""
        ...

    @property
    def reads_ahead(self) -> bool:
        """Whether the next batch can be read before the current one is written.

        True when a batch's cursor moves past its documents whatever the write
        does to them; a partition that drains its scope re-reads until empty.
        """
        ...

    def plan(
        self,
        collection: Collection[Any],
        *,
        match: dict[str, Any],
        hint: Any | None,
        max_parallel: int,
        settings: PartitionSettings,
        count_cap: int = ...,
    ) -> Plan:
        """Split what ``match`` selects into partitions."""
        ...

    def scope_filter(self, scope: Mapping[str, Any]) -> dict[str, Any]:
        """Return the query of every document of ``scope``."""
        ...

    def batch_query(
        self,
        scope: Mapping[str, Any],
        cursor: Mapping[str, Any],
        *,
        limit: int,
        match: dict[str, Any],
        hint: Any | None,
    ) -> BatchQuery:
        """Return the read of the next batch of ``scope`` after ``cursor``."""
        ...

    def advance(
        self,
        cursor: Mapping[str, Any],
        docs: Sequence[Mapping[str, Any]],
        *,
        limit: int,
        left: Sequence[Any] = ...,
    ) -> dict[str, Any] | None:
        """Return the cursor after a whole batch, ``None`` once drained."""
        ...

    def past(
        self,
        cursor: Mapping[str, Any],
        docs: Sequence[Mapping[str, Any]],
        *,
        left: Sequence[Any] = ...,
    ) -> dict[str, Any]:
        """Return the cursor just past a processed prefix of a batch."""
        ...

    def write_filter(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """Return conditions to add to the guarded write of ``doc``."""
        ...

    def check_transform(
        self, before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> Refusal | None:
        """Refuse a rewrite the partitioning cannot carry, else ``None``."""
        ...

    def stale(self, epoch: Any) -> bool:
        """Whether a plan made at ``epoch`` no longer describes the collection."""
        ...
