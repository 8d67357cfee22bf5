"""Background-spec helpers: a migration module built in memory, resolved or refused."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest

from migronaut_core.background.spec import BackgroundSpec, resolve_spec
from migronaut_core.errors import ConfigInvalidError

NAME = "20240501120000_split_names"


SECRET = "s3cr3t-value-never-shown"


def migrate(doc: dict[str, Any], ctx: object) -> dict[str, Any]:
    return doc


def revert(doc: dict[str, Any], ctx: object) -> dict[str, Any]:
    return doc


def migrate_batch(docs: list[dict[str, Any]], ctx: object) -> list[dict[str, Any]]:
    return docs


def step(ctx: object) -> dict[str, Any]:
    return {"checkpoint": None, "done": True}


BASE: dict[str, Any] = {"collection": "users", "from": 1, "to": 2}


def module(background: Any = None, **functions: Any) -> types.ModuleType:
    """Build a migration module the way a file would define it."""
    mod = types.ModuleType(f"migronaut_migrations.m_{NAME}")
    mod.background = dict(BASE) if background is None else background  # type: ignore[attr-defined]
    if not functions:
        functions = {"migrate": migrate}
    for attribute, value in functions.items():
        setattr(mod, attribute, value)
    return mod


def resolve(**overrides: Any) -> BackgroundSpec:
    spec, _ = resolve_spec(NAME, module({**BASE, **overrides}))
    return spec


def refused(call: Callable[[], object], key: str, *, migration: str = NAME) -> ConfigInvalidError:
    with pytest.raises(ConfigInvalidError) as caught:
        call()
    error = caught.value
    assert error.context == {"migration": migration, "key": key}
    assert migration in error.message
    assert SECRET not in error.message
    return error
