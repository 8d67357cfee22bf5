"""Helpers for DAG tests: load the generated DAGs and run them with ``dag.test()``."""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from typing import Any


def load_dags() -> dict[str, Any]:
    """Run the test DAG file as the dag processor would and return its DAGs by id.

    The file is the one the ``dags_folder`` fixture of ``tests/airflow/conftest.py``
    writes into the session's dags folder (``AIRFLOW__CORE__DAGS_FOLDER``).
    """
    dags_folder = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    namespace = runpy.run_path(str(dags_folder / "migronaut_test_dags.py"))
    return {key: value for key, value in namespace.items() if key.startswith("migronaut_")}


def task_states(dag_run: Any) -> dict[tuple[str, int], str]:
    return {(ti.task_id, ti.map_index): ti.state for ti in dag_run.get_task_instances()}


def xcom(dag_run: Any, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
    for ti in dag_run.get_task_instances():
        if ti.task_id == task_id and ti.map_index == map_index:
            from airflow.models.xcom import XComModel
            from airflow.utils.session import create_session

            with create_session() as session:
                row = (
                    session.query(XComModel)
                    .filter_by(
                        dag_id=ti.dag_id,
                        run_id=ti.run_id,
                        task_id=task_id,
                        map_index=map_index,
                        key=key,
                    )
                    .one_or_none()
                )
                return None if row is None else XComModel.deserialize_value(row)
    return None
