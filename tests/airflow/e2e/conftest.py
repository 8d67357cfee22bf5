"""The e2e modules: each starts its own ``airflow standalone`` (tests/support/standalone.py).

Every module defines a module-scoped fixture ``standalone`` (the running
:class:`~tests.support.standalone.Standalone`). After a test that failed, the end of
its Airflow log is printed, followed by what the module's optional hook
``more_on_failure(standalone, request) -> str`` returns (e.g. another log).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.airflow import log_tail_on_failure
from tests.support.standalone import Standalone


@pytest.fixture(autouse=True)
def _airflow_log_on_failure(
    standalone: Standalone, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> Iterator[None]:
    """Show the end of Airflow's log (and the module's ``more_on_failure``) when a test failed."""
    hook = getattr(request.module, "more_on_failure", None)
    extra = "" if hook is None else (lambda: str(hook(standalone, request)))
    yield from log_tail_on_failure(standalone.airflow, request, capsys, extra)
