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


def asset_events(uri: str) -> list[dict[str, Any]]:
    """The ``extra`` of every event recorded for the asset of ``uri``, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = (
            select(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri == uri)
            .order_by(AssetEvent.id)
        )
        return [dict(event.extra or {}) for event in session.scalars(query)]


def run_one_task(module: str, class_name: str, **arguments: Any) -> Any:
    """Run a DAG of one task, ``class_name(task_id="op", **arguments)``, with ``dag.test()``.

    ``dag.test()`` runs only a DAG of a bundle, so the DAG is written as a file in
    the session's dags folder (its id: ``one_<class_name>``), loaded as the dag
    processor would, run, and the file removed. ``arguments`` must be literals.
    """
    dag_file = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / "migronaut_one_task.py"
    dag_file.write_text(
        "from airflow.sdk import DAG\n"
        f"from {module} import {class_name}\n"
        f"with DAG(dag_id='one_{class_name}', schedule=None, catchup=False) as dag:\n"
        f"    {class_name}(task_id='op', **{arguments!r})\n"
    )
    try:
        return runpy.run_path(str(dag_file))["dag"].test()
    finally:
        dag_file.unlink(missing_ok=True)


def sync_dags_to_airflow() -> None:
    """Parse the dags folder into the metadata DB, as the DAG processor would."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db

    manager = DagBundlesManager()
    manager.sync_bundles_to_db()
    for bundle in manager.get_all_dag_bundles():
        bundle.initialize()
        bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
        sync_bag_to_db(bag, bundle.name, bundle.version)
