"""A DAG file whose lanes find their round taken over between mapping and running.

``take_over_before_lanes`` is an ``on_execute_callback`` (given to every task
through ``build_dags(default_args=…)``): when a ``lane`` task starts, after its
arguments were rendered from the ``coordinate`` task's XComs, another driver
takes the migration over with a newer round, as the stall watch's takeover run
does. The lane then runs bound to a superseded round.
"""

from __future__ import annotations

import os
from typing import Any

from migronaut_core import Driver

#: The DAG file, written over the session's ``migronaut_test_dags.py``.
TAKEOVER_DAG_FILE = """
import os
from migronaut_airflow.dags.factory import build_dags
from tests.support.lane_takeover import take_over_before_lanes

globals().update(
    build_dags(
        os.environ["MIGRONAUT_MIGRATIONS_DIR"],
        slice_ms=300,
        no_lease_grace_seconds=1.0,
        poll_interval=0.5,
        migronaut_config={"lock_ttl_seconds": 4},
        default_args={"on_execute_callback": take_over_before_lanes},
    )
)
"""


def take_over_before_lanes(context: Any) -> None:
    """Before a lane task runs, take its migration over with a new round."""
    ti = context["ti"]
    if ti.task_id != "lane":
        return
    from migronaut_airflow.hooks.migronaut import MigronautHook

    hook = MigronautHook(
        "migronaut_default",
        migrations_dir=os.environ["MIGRONAUT_MIGRATIONS_DIR"],
        config={"lock_ttl_seconds": 4},
    )
    try:
        migration = ti.dag_id.removeprefix("migronaut_bg__")
        answer = hook.get_conn().background.coordinate(
            migration, driver=Driver("airflow", ref="takeover", rounds=True)
        )
        assert answer.next == "process", answer
    finally:
        hook.close()
