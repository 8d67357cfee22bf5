"""The error the development tooling raises: no server to test or demo against.

Never shipped: ``migronaut_core`` and the provider never start servers, so
their error tree (:mod:`migronaut_core.errors`) has no place for it.
"""

from __future__ import annotations

from migronaut_core.errors import MigronautError

__all__ = ["ServerUnavailableError"]


class ServerUnavailableError(MigronautError):
    """No MongoDB server could be found or started for tests or the demo."""

    code = "SERVER_UNAVAILABLE"
    exit_code = 10
