"""Config sources, precedence and validation (no server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from migronaut_core.config import config_from_text, load_config, replace
from migronaut_core.errors import ConfigInvalidError
from migronaut_core.health_limits import DEFAULT_HEALTH, HealthLimit
from migronaut_core.windows import parse_windows


def test_defaults_resolve_migrations_dir_against_cwd(tmp_path: Path) -> None:
    config = load_config(cwd=tmp_path, env={})
    assert config.migrations_dir == (tmp_path / "migrations").resolve()
    assert config.changelog_collection == "migronaut_changelog"
    assert config.background_collections.partitions == "migronaut_background_partitions"


def test_precedence_file_then_env_then_arguments(tmp_path: Path) -> None:
    (tmp_path / "migronaut.toml").write_text(
        'uri = "mongodb://file:1"\ndatabase = "from_file"\nmigrations_dir = "db/m"\n'
        "lock_ttl_seconds = 30\n"
    )
    env = {"MIGRONAUT_DATABASE": "from_env"}
    config = load_config({"lock_ttl_seconds": 5, "uri": None}, cwd=tmp_path, env=env)
    assert config.uri == "mongodb://file:1"
    assert config.database == "from_env"
    assert config.lock_ttl_seconds == 5
    assert config.migrations_dir == (tmp_path / "db" / "m").resolve()


def test_pyproject_tool_table_is_read(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.migronaut]\ndatabase = "shop"\n')
    assert load_config(cwd=tmp_path, env={}).database == "shop"


def test_migronaut_toml_wins_over_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.migronaut]\ndatabase = "py"\n')
    (tmp_path / "migronaut.toml").write_text('database = "own"\n')
    assert load_config(cwd=tmp_path, env={}).database == "own"


@pytest.mark.parametrize(
    ("source", "key"),
    [
        ("toml", "colection"),
        ("pyproject", "lock_ttl"),
        ("kwargs", "migrations_directory"),
    ],
)
def test_unknown_key_is_named_with_its_source(tmp_path: Path, source: str, key: str) -> None:
    overrides = {}
    if source == "toml":
        (tmp_path / "migronaut.toml").write_text(f"{key} = 1\n")
    elif source == "pyproject":
        (tmp_path / "pyproject.toml").write_text(f"[tool.migronaut]\n{key} = 1\n")
    else:
        overrides = {key: "x"}
    with pytest.raises(ConfigInvalidError) as raised:
        load_config(overrides, cwd=tmp_path, env={})
    assert raised.value.context["key"] == key
    assert key in raised.value.message
    assert raised.value.code == "CONFIG_INVALID"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("lock_ttl_seconds", "60"),
        ("lock_ttl_seconds", True),
        ("use_transaction", 1),
        ("database", 5),
        ("server_selection_timeout_ms", 1.5),
    ],
)
def test_wrong_type_is_named(tmp_path: Path, key: str, value: object) -> None:
    with pytest.raises(ConfigInvalidError) as raised:
        load_config({key: value}, cwd=tmp_path, env={})
    assert raised.value.context["key"] == key


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("uri", "http://localhost"),
        ("database", "a.b"),
        ("database", "has space"),
        ("changelog_collection", "$bad"),
        ("lock_collection", "system.locks"),
        ("lock_collection", ""),
        ("lock_ttl_seconds", 0),
        ("server_selection_timeout_ms", 10),
    ],
)
def test_bad_values_are_named(tmp_path: Path, key: str, value: object) -> None:
    with pytest.raises(ConfigInvalidError) as raised:
        load_config({key: value}, cwd=tmp_path, env={})
    assert raised.value.context["key"] == key


def test_overlapping_collection_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalidError, match="overlap"):
        load_config({"lock_collection": "migronaut_changelog"}, cwd=tmp_path, env={})


def test_invalid_toml_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "migronaut.toml").write_text("database = \n")
    with pytest.raises(ConfigInvalidError, match="not valid TOML"):
        load_config(cwd=tmp_path, env={})


def test_explicit_config_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalidError, match="does not exist"):
        load_config(config_file=tmp_path / "nope.toml", env={})


def test_database_defaults_to_the_uri_default(tmp_path: Path) -> None:
    config = load_config({"uri": "mongodb://h:1/shop?replicaSet=rs"}, cwd=tmp_path, env={})
    assert config.database_name() == "shop"
    without = load_config({"uri": "mongodb://h:1"}, cwd=tmp_path, env={})
    with pytest.raises(ConfigInvalidError) as raised:
        without.database_name()
    assert raised.value.context["key"] == "database"


def test_replace_validates_again(tmp_path: Path) -> None:
    config = load_config(cwd=tmp_path, env={})
    assert replace(config, use_transaction=True).use_transaction is True
    with pytest.raises(ConfigInvalidError):
        replace(config, lock_ttl_seconds=-1)


def test_ensure_indexes_is_read_from_the_file_the_environment_and_arguments(
    tmp_path: Path,
) -> None:
    assert load_config(cwd=tmp_path, env={}).ensure_indexes is True
    (tmp_path / "pyproject.toml").write_text("[tool.migronaut]\nensure_indexes = false\n")
    assert load_config(cwd=tmp_path, env={}).ensure_indexes is False
    on = {"MIGRONAUT_ENSURE_INDEXES": "True"}
    assert load_config(cwd=tmp_path, env=on).ensure_indexes is True
    assert load_config({"ensure_indexes": False}, cwd=tmp_path, env=on).ensure_indexes is False
    off = {"MIGRONAUT_ENSURE_INDEXES": "0"}
    assert load_config(cwd=tmp_path, env=off).ensure_indexes is False


@pytest.mark.parametrize("value", ["maybe", "", " "])
def test_a_flag_in_the_environment_is_true_or_false(tmp_path: Path, value: str) -> None:
    env = {"MIGRONAUT_ENSURE_INDEXES": value}
    if not value:  # an empty variable is not set
        assert load_config(cwd=tmp_path, env=env).ensure_indexes is True
        return
    with pytest.raises(ConfigInvalidError) as raised:
        load_config(cwd=tmp_path, env=env)
    assert raised.value.context == {"key": "ensure_indexes", "source": "environment"}
    assert "MIGRONAUT_ENSURE_INDEXES must be true or false" in raised.value.message


def test_ensure_indexes_in_a_file_is_a_boolean(tmp_path: Path) -> None:
    (tmp_path / "migronaut.toml").write_text('ensure_indexes = "no"\n')
    with pytest.raises(ConfigInvalidError, match=r"ensure_indexes.*must be bool"):
        load_config(cwd=tmp_path, env={})


def test_background_windows_are_a_target_default_checked_like_a_spec(tmp_path: Path) -> None:
    (tmp_path / "migronaut.toml").write_text(
        '[[background_windows]]\ndays = ["sat", "sun"]\nfrom = "01:00"\nto = "05:00"\n'
        'timezone = "Europe/Paris"\nrate = 0.5\n'
    )
    config = load_config(cwd=tmp_path, env={})
    assert config.background_windows is not None
    (window,) = config.background_windows
    assert (window.days, window.start, window.end, window.fraction) == ((5, 6), 60, 300, 0.5)
    assert load_config(cwd=tmp_path / "none", env={}).background_windows is None


def test_a_bad_target_window_names_the_key_and_its_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalidError) as caught:
        load_config({"background_windows": [{"from": "01:00", "to": "05:00", "days": ["x"]}]})
    assert caught.value.context == {"key": "background_windows.0.days", "source": "arguments"}
    with pytest.raises(ConfigInvalidError) as caught:
        replace(load_config(cwd=tmp_path, env={}), background_windows=[{"from": "01:00"}])
    assert caught.value.context["key"] == "background_windows.0.to"
    kept = load_config({"background_windows": [{"from": "01:00", "to": "02:00"}]}, env={})
    again = replace(kept, background_windows=kept.background_windows)
    assert again.background_windows == kept.background_windows


def test_target_windows_given_as_text_are_json() -> None:
    text = '[{"from": "22:00", "to": "06:00", "rate": "100/s"}]'
    values = config_from_text({"background_windows": text}, "Airflow configuration [migronaut]")
    assert load_config(values, env={}).background_windows == parse_windows(json.loads(text))
    with pytest.raises(ConfigInvalidError) as caught:
        config_from_text({"background_windows": "22:00-06:00"}, "airflow")
    assert caught.value.context == {"key": "background_windows", "source": "airflow"}


def test_background_health_is_a_target_default_checked_like_a_spec(tmp_path: Path) -> None:
    (tmp_path / "migronaut.toml").write_text(
        "[background_health]\ncache_dirty = { soft = 0.05 }\noplog_window_s = false\n"
    )
    health = load_config(cwd=tmp_path, env={}).background_health
    assert health is not None
    assert health.cache_dirty == HealthLimit(soft=0.05, hard=0.20)
    assert health.oplog_window_s == HealthLimit()
    assert health.majority_lag_ms == DEFAULT_HEALTH.majority_lag_ms
    assert load_config(cwd=tmp_path / "none", env={}).background_health == DEFAULT_HEALTH
    assert load_config({"background_health": False}, env={}).background_health is None
    assert load_config({"background_health": True}, env={}).background_health == DEFAULT_HEALTH
    kept = load_config({"background_health": {"queued_operations": {"hard": 64}}}, env={})
    assert replace(kept, background_health=kept.background_health) == kept
    assert replace(kept, background_health=False).background_health is None


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("on", "background_health"),
        ({"cache_dirt": {"soft": 0.1}}, "background_health.cache_dirt"),
        ({"cache_dirty": {"soft": 0.9}}, "background_health.cache_dirty.soft"),
        ({"write_tickets": {"hard": 7.5}}, "background_health.write_tickets.hard"),
    ],
)
def test_a_bad_target_health_limit_names_the_key_and_its_source(value: object, key: str) -> None:
    with pytest.raises(ConfigInvalidError) as caught:
        load_config({"background_health": value}, env={})
    assert caught.value.context == {"key": key, "source": "arguments"}
    assert "0.9" not in caught.value.message and "7.5" not in caught.value.message


def test_target_health_given_as_text_is_json() -> None:
    text = '{"majority_lag_ms": {"soft": 500, "hard": 5000}}'
    values = config_from_text({"background_health": text}, "Airflow configuration [migronaut]")
    health = load_config(values, env={}).background_health
    assert health is not None and health.majority_lag_ms == HealthLimit(soft=500, hard=5000)
    off = config_from_text({"background_health": "false"}, "airflow")
    assert load_config(off, env={}).background_health is None
    with pytest.raises(ConfigInvalidError) as caught:
        config_from_text({"background_health": "cache_dirty=0.1"}, "airflow")
    assert caught.value.context == {"key": "background_health", "source": "airflow"}
