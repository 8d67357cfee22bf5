"""The shipped DAG file as a deployment's DAG processor parses it: Airflow's own ``DagBag``.

A stray file in the migrations folder is named (a warning the parse records, and
``migronaut_up``'s page) while every other DAG is still built; a missing folder
is an import error naming the path; nothing is parsed twice across processes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag

from tests.support.background import SPLIT_NAME, write_background

pytestmark = pytest.mark.airflow

SHIPPED = Path(__file__).parents[3] / "dags" / "migronaut_dags.py"
HELPER = "def shared(doc):\n    return doc\n"
BROKEN = "background = {'collection': 'users',\n"


@pytest.fixture
def dags_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A dags folder as docs/getting-started.md lays it out: the DAG file, migrations beside."""
    folder = tmp_path / "dags"
    folder.mkdir()
    shutil.copy(SHIPPED, folder / SHIPPED.name)
    (folder / ".airflowignore").write_text("migrations/\n")
    for name in list(os.environ):
        if name.startswith(("AIRFLOW__MIGRONAUT__", "MIGRONAUT_MIGRATIONS", "MIGRONAUT_CONN")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__MIGRATIONS_DIR", str(folder / "migrations"))
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__ASSET_HOST", "mongo.internal")
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__DATABASE", "shop")
    return folder


def test_a_stray_helper_module_is_named_and_every_other_dag_is_built(dags_folder: Path) -> None:
    migrations = dags_folder / "migrations"
    write_background(migrations)
    (migrations / "helpers.py").write_text(HELPER)
    (migrations / "20240105000000_half_written.py").write_text(BROKEN)

    bag = DagBag(dag_folder=dags_folder)

    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {
        "migronaut_up",
        "migronaut_control",
        "migronaut_admin",
        "migronaut_drift",
        "migronaut_drift_events",
        "migronaut_stalls",
        f"migronaut_bg__{SPLIT_NAME}",
    }
    (warnings,) = bag.captured_warnings.values()
    named = "\n".join(warnings)
    assert "helpers.py" in named and "not a migration name" in named
    assert "20240105000000_half_written.py" in named and "invalid Python (line" in named
    assert "collection" not in named  # the reason, never the file's text
    up_page = bag.dags["migronaut_up"].doc_md
    assert "`helpers.py`" in up_page and "`20240105000000_half_written.py`" in up_page


def test_a_missing_migrations_folder_is_an_import_error_naming_the_path(
    dags_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    misspelled = dags_folder / "migratoins"
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__MIGRATIONS_DIR", str(misspelled))

    bag = DagBag(dag_folder=dags_folder)

    assert bag.dag_ids == []
    (error,) = bag.import_errors.values()
    assert str(misspelled) in error and "does not exist" in error


def test_migration_dags_start_unpaused_and_need_no_connection_to_parse(dags_folder: Path) -> None:
    write_background(dags_folder / "migrations")
    # No connection named migronaut_default exists: the parse never looks one up.
    bag = DagBag(dag_folder=dags_folder)
    assert bag.import_errors == {}
    assert all(dag.is_paused_upon_creation is False for dag in bag.dags.values())


def test_a_file_is_read_once_across_processes_until_it_changes(dags_folder: Path) -> None:
    """A second process (a task start) answers from the cache a first one (the parse) wrote."""
    migrations = dags_folder / "migrations"
    write_background(migrations)
    probe = (
        "import ast, sys\n"
        "from migronaut_core import read_catalog\n"
        "parsed = []\n"
        "real = ast.parse\n"
        "ast.parse = lambda *a, **k: parsed.append(1) or real(*a, **k)\n"
        "read_catalog(sys.argv[1], cache_dir=sys.argv[2])\n"
        "print(len(parsed))\n"
    )
    cache = dags_folder.parent / "cache"

    def files_parsed() -> int:
        run = subprocess.run(
            [sys.executable, "-c", probe, str(migrations), str(cache)],
            check=True,
            capture_output=True,
            text=True,
        )
        return int(run.stdout)

    assert files_parsed() == 1
    assert files_parsed() == 0
    write_background(migrations, "20240102000000_second", extra='"filter": {"x": 1},')
    assert files_parsed() == 1
    (migrations / f"{SPLIT_NAME}.py").write_text(
        (migrations / f"{SPLIT_NAME}.py").read_text() + "\n# edited\n"
    )
    assert files_parsed() == 1
