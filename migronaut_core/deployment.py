"""What the connected deployment can do, asked of the server (never assumed).

The runner and the background engine both need to know whether multi-document
transactions are available (a replica set or a sharded cluster, not a
standalone server), and the live drift watcher whether change streams are;
both come down to one question — is this a standalone server? — which is asked
here, below all of them.
"""

from __future__ import annotations

from typing import Any

from pymongo import MongoClient
from pymongo.topology_description import TOPOLOGY_TYPE

#: Topologies the driver can only have discovered from replica-set members or mongos
#: routers: none of them is a standalone server.
_NOT_STANDALONE = (
    TOPOLOGY_TYPE.ReplicaSetWithPrimary,
    TOPOLOGY_TYPE.ReplicaSetNoPrimary,
    TOPOLOGY_TYPE.Sharded,
    TOPOLOGY_TYPE.LoadBalanced,
)


def is_standalone(client: MongoClient[dict[str, Any]]) -> bool:
    """Whether the client talks to a standalone ``mongod`` (no replica set, no mongos).

    The driver's topology type alone cannot tell: a ``directConnection=true``
    client (or a one-host URI without ``replicaSet``) reads as ``Single`` even when
    its one server is a replica-set primary or a mongos, so a ``Single`` topology
    asks the server itself (``hello``'s ``setName``, or mongos's ``isdbgrid``).
    """
    client.admin.command("ping")
    if client.topology_description.topology_type in _NOT_STANDALONE:
        return False
    hello = client.admin.command("hello")
    return not (hello.get("setName") or hello.get("msg") == "isdbgrid")


def supports_transactions(client: MongoClient[dict[str, Any]]) -> bool:
    """Whether the connected deployment can run multi-document transactions.

    Anything but a standalone server can (the seeds' rule): a replica set, a
    sharded cluster, a load balancer in front of mongos, or a direct connection
    to one of their members.
    """
    return not is_standalone(client)
