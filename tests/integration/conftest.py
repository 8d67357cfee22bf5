"""Fixtures most integration modules share; a module that needs another (a short lock
TTL, files written up front) defines its own of the same name, which wins."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.database import Database

from migronaut_core import Migronaut
from tests.support.background import make_kit


@pytest.fixture
def migrations(tmp_path: Path) -> Path:
    """An empty migrations directory (created by the first file a test writes)."""
    return tmp_path / "migrations"


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Iterator[Migronaut]:
    """A kit on the test's database and ``migrations``, with the default configuration."""
    with make_kit(mongo_uri, db, migrations) as kit:
        yield kit


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (``pytest.mark.anyio``) run on asyncio, as Airflow's triggerer does."""
    return "asyncio"


@pytest.fixture
async def adb(mongo_uri: str, db: Database[dict[str, Any]]) -> AsyncIterator[AsyncDatabase[Any]]:
    """The test's database through an ``AsyncMongoClient`` (what Airflow's triggers use)."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    try:
        yield client[db.name]
    finally:
        await client.close()
