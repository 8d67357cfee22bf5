"""The two distributions, built as wheels and installed (not editable) into clean venvs.

``migronaut-core`` alone imports, runs ``migronaut --help`` and ``migronaut status``
against the test server, with no Airflow in its venv; ``migronaut-airflow`` (with the
core wheel) shows up in ``airflow providers list`` and its plugin loads. Each wheel
carries its package and nothing else. uv builds and installs them, from the index the
development environment uses (``scripts/_venv.sh`` exports it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from tests.support.cli import configure
from tests.support.runner import write_migration

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO_ROOT = Path(__file__).resolve().parents[2]
MIGRATION = "20240101000000_add_thing"


def core_version() -> str:
    """``migronaut_core.__version__`` as written, the one version of both distributions."""
    source = (REPO_ROOT / "migronaut_core" / "__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"$', source, re.MULTILINE)
    assert found is not None
    return found[1]


VERSION = core_version()


@dataclass(frozen=True)
class Wheels:
    core: Path
    airflow: Path


def uv() -> str:
    """The ``uv`` of the development environment (or on PATH); fail without one."""
    beside = Path(sys.executable).with_name("uv")
    found = str(beside) if beside.exists() else shutil.which("uv")
    if found is None:
        pytest.fail("uv is not installed: run `bash scripts/test.sh` once", pytrace=False)
    return found


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that would show a venv the checkout."""
    hidden = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in hidden and not key.startswith("AIRFLOW")
    }
    return {**env, **extra}


def run(*args: str | Path, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("env", clean_env())
    done = subprocess.run(
        [str(arg) for arg in args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        **kwargs,
    )
    if check:
        assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def make_venv(path: Path, *wheels: Path) -> Path:
    """A fresh venv at ``path`` holding ``wheels`` and their dependencies; its bin/."""
    run(uv(), "venv", "--quiet", "--python", sys.executable, path)
    run(uv(), "pip", "install", "--quiet", "--python", path / "bin" / "python", *wheels)
    return path / "bin"


def shipped_files(wheel: Path) -> set[str]:
    """What a wheel installs, its ``.dist-info`` aside."""
    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if ".dist-info/" not in name}


def source_files(package: str) -> set[str]:
    """Every file of a top-level package of the checkout, bytecode aside."""
    return {
        path.relative_to(REPO_ROOT).as_posix()
        for path in (REPO_ROOT / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def metadata(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        dist_info = next(n.split("/")[0] for n in archive.namelist() if ".dist-info/" in n)
        return archive.read(f"{dist_info}/{name}").decode()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Wheels:
    """Both distributions built as ``uv build`` does (sdist, then the wheel from it)."""
    out = tmp_path_factory.mktemp("dist")
    for folder in ("core", "airflow"):
        run(uv(), "build", "--quiet", REPO_ROOT / "distributions" / folder, "--out-dir", out)
    return Wheels(
        core=out / f"migronaut_core-{VERSION}-py3-none-any.whl",
        airflow=out / f"migronaut_airflow-{VERSION}-py3-none-any.whl",
    )


@pytest.fixture(scope="module")
def core_bin(wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_venv(tmp_path_factory.mktemp("core") / "venv", wheels.core)


@pytest.fixture(scope="module")
def airflow_bin(wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_venv(tmp_path_factory.mktemp("airflow") / "venv", wheels.core, wheels.airflow)


def test_each_wheel_carries_its_package_and_nothing_else(wheels: Wheels) -> None:
    assert shipped_files(wheels.core) == source_files("migronaut_core")
    assert shipped_files(wheels.airflow) == source_files("migronaut_airflow")
    assert {
        "migronaut_airflow/plugins/static/icon.svg",
        "migronaut_airflow/plugins/templates/base.html",
    } <= shipped_files(wheels.airflow)


def test_the_wheels_declare_their_dependencies_and_entry_points(wheels: Wheels) -> None:
    core = Parser().parsestr(metadata(wheels.core, "METADATA"))
    assert (core["Name"], core["Version"]) == ("migronaut-core", VERSION)
    assert sorted(core.get_all("Requires-Dist") or []) == [
        "opentelemetry-api>=1.20; extra == 'otel'",
        "pendulum<4,>=3.0",
        "pymongo<5,>=4.9",
        "rich>=13; extra == 'rich'",
    ]
    assert "migronaut = migronaut_core.cli:main" in metadata(wheels.core, "entry_points.txt")

    provider = Parser().parsestr(metadata(wheels.airflow, "METADATA"))
    assert (provider["Name"], provider["Version"]) == ("migronaut-airflow", VERSION)
    requires = provider.get_all("Requires-Dist") or []
    assert f"migronaut-core=={VERSION}" in requires
    assert {r.split(">")[0] for r in requires} >= {
        "apache-airflow",
        "apache-airflow-providers-mongo",
    }
    entry_points = metadata(wheels.airflow, "entry_points.txt")
    assert "provider_info = migronaut_airflow:get_provider_info" in entry_points
    assert "migronaut = migronaut_airflow.plugins.plugin:MigronautPlugin" in entry_points


def test_the_core_wheel_alone_runs_its_cli_without_airflow(
    core_bin: Path, mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    no_airflow = run(core_bin / "python", "-c", "import airflow", check=False, cwd=tmp_path)
    assert no_airflow.returncode != 0
    assert "No module named 'airflow'" in no_airflow.stderr
    where = run(
        core_bin / "python",
        "-c",
        "import migronaut_core, importlib.util as u;"
        "print(migronaut_core.__file__); print(u.find_spec('migronaut_dev'))",
        cwd=tmp_path,
    ).stdout.split()
    assert Path(where[0]).is_relative_to(core_bin.parent), where  # the wheel's, not the checkout's
    assert where[1] == "None"

    helped = run(core_bin / "migronaut", "--help", cwd=tmp_path)
    assert "usage: migronaut" in helped.stdout

    configure(tmp_path, mongo_uri, db.name)
    write_migration(tmp_path / "migrations", MIGRATION)
    status = run(core_bin / "migronaut", "status", "--json", cwd=tmp_path)
    rows = json.loads(status.stdout)
    assert [(row["name"], row["status"]) for row in rows] == [(MIGRATION, "pending")]


def test_the_provider_wheel_registers_the_provider_and_loads_its_plugin(
    airflow_bin: Path, tmp_path: Path
) -> None:
    env = clean_env(
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        PATH=os.pathsep.join([str(airflow_bin), os.environ.get("PATH", "")]),
    )
    listed = run(airflow_bin / "airflow", "providers", "list", "--output", "json", env=env)
    providers = {p["package_name"]: p for p in json.loads(listed.stdout)}
    assert providers["migronaut-airflow"]["version"] == VERSION

    plugins = run(airflow_bin / "airflow", "plugins", "--output", "json", env=env)
    loaded = {p["name"]: p for p in json.loads(plugins.stdout)}
    migronaut = loaded["migronaut"]
    assert migronaut["source"].startswith(f"migronaut-airflow=={VERSION}: EntryPoint(")
    assert [app["url_prefix"] for app in migronaut["fastapi_apps"]] == ["/migronaut"]
    assert "Migrations" in {view["name"] for view in migronaut["external_views"]}
