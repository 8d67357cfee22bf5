"""Helpers for background-migration tests: migration files, seeding, a kit."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymongo.database import Database

from migronaut_core import Migronaut

SPLIT_NAME = "20240101000000_split_names"

SPLIT_NAMES = """
import time

description = "Split name into first and last"

background = {{
    "collection": "users",
    "from": 1,
    "to": 2,
    "batch_size": {batch_size},
    "max_parallel": {max_parallel},
    {extra}
}}


def migrate(doc, ctx):
{pause}    first, _, last = doc.pop("name").partition(" ")
    doc["first"] = first
    doc["last"] = last
    return doc


def revert(doc, ctx):
    doc["name"] = f"{{doc.pop('first')}} {{doc.pop('last')}}"
    return doc
"""

#: The same migration as :data:`SPLIT_NAMES`, written as an update pipeline (no Python).
SPLIT_NAMES_UPDATE = """
description = "Split name into first and last, on the server"

_PARTS = {{"$split": ["$name", " "]}}

background = {{
    "collection": "users",
    "from": 1,
    "to": 2,
    "batch_size": {batch_size},
    "max_parallel": {max_parallel},
    {extra}
    "update": [
        {{"$set": {{
            "first": {{"$arrayElemAt": [_PARTS, 0]}},
            "last": {{"$arrayElemAt": [_PARTS, 1]}},
        }}}},
        {{"$unset": "name"}},
    ],
    "revert_update": [
        {{"$set": {{"name": {{"$concat": ["$first", " ", "$last"]}}}}}},
        {{"$unset": ["first", "last"]}},
    ],
}}
"""


def write_background(
    directory: Path,
    name: str = SPLIT_NAME,
    *,
    batch_size: int = 500,
    max_parallel: int = 4,
    extra: str = "",
    body: str | None = None,
    per_document_seconds: float = 0.0,
    update: bool = False,
) -> Path:
    """Write the name-splitting migration; ``per_document_seconds`` slows its transform.

    A slowed transform bounds how much one slice can do whatever the machine's
    speed, for tests that need a pass to outlast a round. ``update`` writes it
    as an update pipeline instead (:data:`SPLIT_NAMES_UPDATE`).
    """
    if update:
        body = SPLIT_NAMES_UPDATE.format(
            batch_size=batch_size, max_parallel=max_parallel, extra=extra
        )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    source = (
        body
        if body is not None
        else SPLIT_NAMES.format(
            batch_size=batch_size,
            max_parallel=max_parallel,
            extra=extra,
            pause=f"    time.sleep({per_document_seconds!r})\n" if per_document_seconds else "",
        )
    )
    path.write_text(textwrap.dedent(source))
    return path


def seed_users(
    db: Database[dict[str, Any]], count: int, *, start: int = 0, version: int = 1
) -> None:
    docs = [
        {
            "_id": start + i,
            "name": f"First{start + i} Last{start + i}",
            "_v": version,
            "n": start + i,
        }
        for i in range(count)
    ]
    for offset in range(0, len(docs), 10_000):
        db.users.insert_many(docs[offset : offset + 10_000], ordered=False)


def make_kit(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path, **extra: Any
) -> Migronaut:
    return Migronaut(uri=mongo_uri, database=db.name, migrations_dir=str(migrations), **extra)


INITIALS_NAME = "20240102000000_add_initials"
ADD_INITIALS = """
description = "Add initials"

background = {"collection": "users", "from": 2, "to": 3, "batch_size": 100, "max_parallel": 2}


def migrate(doc, ctx):
    doc["initials"] = doc["first"][:1] + doc["last"][:1]
    return doc
"""


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "it") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


FLAKY_NAME = "20240103000000_split_flaky"
#: A name split whose transform fails on every ``n`` ending in 3 while ``BROKEN`` (its
#: message quotes the document, which must never leave the engine), on ``n == 13``
#: also once fixed (a ``KeyError``), and which, once fixed, plays an application write
#: to document 23 (a new name, its revision bumped) while transforming it.
FLAKY_SPLIT = """
import time

background = {{
    "collection": "users",
    "from": 1,
    "to": 2,
    "batch_size": 20,
    "max_parallel": 2,
    "revision_field": "_rev",
    "max_document_errors": {max_document_errors},
}}

BROKEN = True
SLOW = 0.0


def migrate(doc, ctx):
    time.sleep(SLOW)
    n = doc["n"]
    if BROKEN and n % 10 == 3:
        raise ValueError("cannot split " + doc["name"])
    if n == 13:
        raise KeyError(doc["name"])
    if n == 23 and not doc["name"].startswith("Changed"):
        ctx.db.users.update_one(
            {{"_id": doc["_id"]}}, {{"$set": {{"name": "Changed Person"}}, "$inc": {{"_rev": 1}}}}
        )
    first, _, last = doc.pop("name").partition(" ")
    return {{**doc, "first": first, "last": last}}
"""


def write_flaky(directory: Path, *, max_document_errors: int = 100) -> Path:
    """Write :data:`FLAKY_SPLIT` (broken); :func:`fix_flaky` repairs it on disk."""
    return write_background(
        directory,
        FLAKY_NAME,
        body=FLAKY_SPLIT.format(max_document_errors=max_document_errors),
    )


def fix_flaky(path: Path, *, per_document_seconds: float = 0.0) -> None:
    """Repair the transform :func:`write_flaky` wrote (a new checksum: repin it), slowed
    by ``per_document_seconds`` (so a slice of the retry can end part-way)."""
    fixed = path.read_text().replace("BROKEN = True", "BROKEN = False")
    path.write_text(fixed.replace("SLOW = 0.0", f"SLOW = {per_document_seconds!r}"))
