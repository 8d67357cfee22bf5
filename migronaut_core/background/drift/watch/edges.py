"""What a collection's watcher serves: its edges, and the change stream's pipeline.

An *edge* is one completed forward declarative migration of the collection.
The watcher upgrades with them in order of source version (1→2, then 2→3) and
stands aside while a revert is at work on the collection. These functions are
pure: they read state documents and build the pipeline, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from migronaut_core.background.job import Job
from migronaut_core.background.spec import REWRITING_MODES
from migronaut_core.background.states import TERMINAL
from migronaut_core.background.store import StateDocument

__all__ = [
    "Edge",
    "drift_pipeline",
    "edge_signature",
    "edge_states",
    "watch_pipeline",
    "watched_collections",
]

Document = dict[str, Any]

_EVENTS = ("insert", "update", "replace")


@dataclass(frozen=True, slots=True)
class Edge:
    """One completed forward migration of a watched collection, ready to upgrade with."""

    name: str
    field: str
    source: int
    target: int
    job: Job
    #: What makes this edge different from a re-read one (reload when it changes).
    signature: tuple[Any, ...]


def watched_collections(states: Sequence[StateDocument], wanted: Sequence[str] | None) -> list[str]:
    """Collections with a completed forward migration that rewrites documents (Python
    or update pipeline) and no revert at work."""
    completed: set[str] = set()
    reverting: set[str] = set()
    for state in states:
        spec = state.get("spec") or {}
        collection = spec.get("collection")
        if not collection or spec.get("mode", "declarative") not in REWRITING_MODES:
            continue
        if state.get("direction") == "revert":
            if state.get("status") not in TERMINAL:
                reverting.add(collection)
            continue
        if state.get("status") == "completed":
            completed.add(collection)
    names = completed - reverting
    if wanted is not None:
        names &= set(wanted)
    return sorted(names)


def edge_states(states: Sequence[StateDocument], collection: str) -> list[StateDocument]:
    """The states a collection's watcher upgrades with, in order of source version.

    Empty while a revert is at work on the collection: the watcher stands aside.
    """
    if collection not in watched_collections(states, [collection]):
        return []
    edges = [
        state
        for state in states
        if state.get("status") == "completed"
        and state.get("direction") != "revert"
        and (state.get("spec") or {}).get("collection") == collection
        and (state.get("spec") or {}).get("mode", "declarative") in REWRITING_MODES
    ]
    return sorted(
        edges, key=lambda state: (state["spec"]["from"], state["spec"]["to"], state["_id"])
    )


def edge_signature(state: StateDocument) -> tuple[Any, ...]:
    """What tells a migration's edge from a re-read one (the stream reloads when it changes)."""
    return (
        state["_id"],
        state.get("checksum"),
        state.get("generation", 0),
        len(state.get("bad_ids") or []),
    )


def watch_pipeline(edges: Sequence[Edge]) -> list[Document]:
    """The watcher's change-stream pipeline: :func:`drift_pipeline` of its edges."""
    return drift_pipeline((edge.field, edge.source) for edge in edges)


def drift_pipeline(sources: Iterable[tuple[str, int]]) -> list[Document]:
    """A change stream's pipeline: writes that leave a document at a source version.

    :param sources: (version field, source version) of each migration served.
    Inserts, updates and replaces whose (looked-up) document is at one of them,
    plus ``invalidate``. Only the event's id, type, document key and cluster
    time travel back: no document values.
    """
    by_field: dict[str, set[int]] = {}
    for name, source in sources:
        by_field.setdefault(name, set()).add(source)
    branches = [
        {f"fullDocument.{name}": {"$in": [None if v == 0 else v for v in sorted(versions)]}}
        for name, versions in sorted(by_field.items())
    ]
    return [
        {
            "$match": {
                "$or": [
                    {"operationType": "invalidate"},
                    {"operationType": {"$in": list(_EVENTS)}, "$or": branches},
                ]
            }
        },
        {"$project": {"operationType": 1, "documentKey": 1, "clusterTime": 1}},
    ]
