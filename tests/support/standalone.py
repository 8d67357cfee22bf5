"""One ``airflow standalone`` over a fresh database: the set-up of the e2e modules.

Each module of ``tests/airflow/e2e`` starts its own Airflow (one per module) through
:func:`running_standalone`, passing what differs: the DAG file's options, extra
environment, what to seed before Airflow starts, the start-up timeout. The end of
Airflow's log after a failed test is printed by ``tests/airflow/e2e/conftest.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_dev.airflow_standalone import AirflowStandalone, install_dag_file
from migronaut_dev.endpoints import airflow_connection
from tests.support.background import make_kit

#: How long an ``airflow standalone`` may take to answer: on two busy cores (a CI run
#: beside other work) its start has taken over three minutes; a quiet one takes one.
START_TIMEOUT_S = 420.0


@dataclass
class Ground:
    """What exists before Airflow starts: a fresh database, its folders, maybe a kit."""

    root: Path
    db: Database[dict[str, Any]]
    mongo_uri: str
    #: ``root/migrations``: ``MIGRONAUT_MIGRATIONS_DIR`` and the kit's folder (not created).
    migrations: Path
    #: ``root/dags``, holding the shipped DAG file.
    dags: Path
    #: ``root/airflow``, Airflow's home (not created).
    home: Path
    _kit: Migronaut | None = field(default=None, repr=False)

    @property
    def kit(self) -> Migronaut:
        """The kit over :attr:`db` and :attr:`migrations`; fails when none was made."""
        assert self._kit is not None, "this standalone was set up without a kit"
        return self._kit


@dataclass
class Standalone(Ground):
    """A running ``airflow standalone`` over :attr:`db`."""

    airflow: AirflowStandalone = field(kw_only=True, repr=False)


def register(ground: Ground) -> None:
    """The default once the kit is made: ``up`` registers the migrations their DAGs run."""
    ground.kit.runs.up()


@contextmanager
def running_standalone(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    dag_options: str,
    *,
    seed: Callable[[Ground], object] | None = None,
    kit: Mapping[str, Any] | None = None,
    with_kit: Callable[[Ground], object] = register,
    env: Mapping[str, str] | None = None,
    migrations_env: bool = True,
    start_timeout: float = START_TIMEOUT_S,
) -> Iterator[Standalone]:
    """Set up a database and Airflow over it; yield them running; tear all of it down.

    In order: a fresh database ``t_<hex>``; the shipped DAG file in ``root/dags`` with
    ``dag_options`` (keywords of its ``build_all_dags``, as source); ``seed`` (data,
    migration files, anything Airflow's home needs); a kit (``make_kit``'s keywords
    ``kit``; ``None``: no kit) and ``with_kit`` (default: ``kit.runs.up()``); then
    ``airflow standalone`` with ``AIRFLOW_CONN_MIGRONAUT_DEFAULT`` on the database,
    ``MIGRONAUT_MIGRATIONS_DIR`` (unless ``migrations_env`` is false) and ``env``.
    After the ``with`` block Airflow is stopped, no process of it may be left, and
    the database is dropped.

    :param name: the temporary folder's name.
    """
    db = mongo_client[f"t_{uuid.uuid4().hex[:12]}"]
    root = tmp_path_factory.mktemp(name)
    ground = Ground(root, db, mongo_uri, root / "migrations", root / "dags", root / "airflow")
    try:
        install_dag_file(ground.dags, dag_options)
        if seed is not None:
            seed(ground)
        full_env = {"AIRFLOW_CONN_MIGRONAUT_DEFAULT": airflow_connection(mongo_uri, db.name)}
        if migrations_env:
            full_env["MIGRONAUT_MIGRATIONS_DIR"] = str(ground.migrations)
        full_env.update(env or {})
        with ExitStack() as stack:
            if kit is not None:
                ground._kit = stack.enter_context(make_kit(mongo_uri, db, ground.migrations, **kit))
                with_kit(ground)
            airflow = stack.enter_context(
                AirflowStandalone(ground.home, ground.dags, full_env, start_timeout=start_timeout)
            )
            yield Standalone(**vars(ground), airflow=airflow)
        left = [" ".join(proc.cmdline()) for proc in airflow.processes()]
        assert not left, f"Airflow processes left behind: {left}"
    finally:
        mongo_client.drop_database(db.name)
