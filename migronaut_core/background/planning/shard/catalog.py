"""Read what a cluster's ``config`` database says about its sharded collections.

:class:`ShardCatalog` asks ``config.collections`` for a collection's
:class:`~.chunks.Sharding` and ``config.chunks`` for its chunks, read again
when they changed while read. A user without the privilege to read
``config`` (``clusterMonitor``) gets :data:`UNKNOWN`.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Final, Literal

from pymongo.errors import OperationFailure

from migronaut_core.background.planning.shard.chunks import (
    Chunk,
    Sharding,
    chunk_filter,
    chunks_from,
    sharding_from,
)
from migronaut_core.errors import ShardMetadataError
from migronaut_core.server_errors import is_unauthorized

if TYPE_CHECKING:
    from pymongo import MongoClient
    from pymongo.database import Database

__all__ = ["UNKNOWN", "ShardCatalog"]

#: Reads of ``config.chunks`` before inconsistent metadata is an error.
_CHUNK_READS: Final = 3


class _Unknown(enum.Enum):
    UNKNOWN = "unknown"


#: What :meth:`ShardCatalog.sharding_of` answers when it may not read ``config``.
UNKNOWN: Final = _Unknown.UNKNOWN


class ShardCatalog:
    """Reads what a cluster's ``config`` database says about sharded collections.

    :param client: the kit's client.
    :param config_db: where ``collections`` and ``chunks`` are read (default:
        the ``config`` database). Tests point it at recorded documents.
    :param sharded: whether the deployment is a sharded cluster (default: asked
        of the topology once it is known).
    """

    def __init__(
        self,
        client: MongoClient[dict[str, Any]],
        *,
        config_db: Database[dict[str, Any]] | None = None,
        sharded: bool | None = None,
    ) -> None:
        self._client = client
        self._config = config_db
        self._sharded = sharded

    @property
    def config(self) -> Database[dict[str, Any]]:
        return self._config if self._config is not None else self._client["config"]

    def is_sharded(self) -> bool:
        """Whether this client talks to a ``mongos`` (asked once the topology is known)."""
        if self._sharded is None:
            self._client.admin.command("ping")
            kind = self._client.topology_description.topology_type_name
            if kind == "Unknown":
                return False
            self._sharded = kind == "Sharded"
        return self._sharded

    def sharding_of(self, namespace: str) -> Sharding | Literal[_Unknown.UNKNOWN] | None:
        """The shard facts of ``namespace``; ``None`` when not sharded; :data:`UNKNOWN`
        when ``config`` may not be read."""
        try:
            doc = self.config["collections"].find_one({"_id": namespace})
        except OperationFailure as exc:
            if is_unauthorized(exc):
                return UNKNOWN
            raise
        return sharding_from(doc)

    def chunks_of(self, sharding: Sharding) -> list[Chunk]:
        """Read a collection's chunks, again if they changed while read.

        :raises ShardMetadataError: they never held together (retryable).
        """
        for attempt in range(_CHUNK_READS):
            docs = list(
                self.config["chunks"].find(
                    chunk_filter(sharding),
                    {"min": 1, "max": 1, "shard": 1, "jumbo": 1},
                    sort=[("min", 1)],
                )
            )
            try:
                return chunks_from(docs, sharding.key)
            except ShardMetadataError:
                if attempt + 1 == _CHUNK_READS:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover
