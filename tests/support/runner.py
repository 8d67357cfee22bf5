"""Helpers for runner tests: migration files written into a temp directory."""

from __future__ import annotations

import textwrap
from pathlib import Path

COUNTING_MIGRATION = """
import os, time

description = "counts its runs"

def up(ctx):
    ctx.db.runs.update_one({"_id": ctx.name}, {"$inc": {"n": 1}}, upsert=True,
                           session=ctx.session)
    time.sleep(float(os.environ.get("MIGRONAUT_TEST_SLEEP", "0")))

def down(ctx):
    ctx.db.runs.update_one({"_id": ctx.name}, {"$inc": {"n": -1}}, session=ctx.session)
"""


def write_migration(directory: Path, name: str, body: str = COUNTING_MIGRATION) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return path
