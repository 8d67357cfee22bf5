"""What the connected deployment can do, asked of the server (never assumed).

The runner and the background engine both need to know whether multi-document
transactions are available (a replica set or a sharded cluster, not a
standalone server); asking lives here, below both.
"""

from __future__ import annotations

from typing import Any

from pymongo import MongoClient
from pymongo.topology_description import TOPOLOGY_TYPE


def supports_transactions(client: MongoClient[dict[str, Any]]) -> bool:
    """Whether the connected deployment can run multi-document transactions."""
    client.admin.command("ping")
    topology = client.topology_description.topology_type
    return topology in (TOPOLOGY_TYPE.ReplicaSetWithPrimary, TOPOLOGY_TYPE.Sharded)
