"""The UI plugin's API and pages: FastAPI's test client, Airflow's real auth, a real mongod.

The app under test is built as Airflow's API server builds its own, less its
REST views: Airflow mounts the plugin's app at ``/migronaut`` (found through the
``airflow.plugins`` entry point) and the simple auth manager's app at ``/auth``.
Users ``viewer`` (role viewer), ``editor`` (role user: may edit DAGs) and
``admin`` sign in through the real ``POST /auth/token`` with the passwords the
auth manager generated; their JWTs go in the ``Authorization`` header or the
``_token`` cookie, as Airflow's UI sends them. Nothing of Airflow's auth is mocked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_airflow.operators.background import dag_id_for
from migronaut_core.files import file_checksum
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, write_background
from tests.support.dags import sync_dags_to_airflow
from tests.support.ui import UI, Airflow, signed_in_app
from tests.support.validator import step

SENTINEL = "Zq9SentinelValue"
USERS = {"viewer": "viewer", "editor": "user", "admin": "admin"}


@pytest.fixture(scope="module")
def airflow(airflow_db: Path) -> Iterator[Airflow]:
    """The API server's app as Airflow builds it, but without its own REST views (slow to build)."""
    with signed_in_app(USERS) as app:
        yield app


def drop_runs(dag_id: str) -> list[Any]:
    """Delete the DAG's queued runs (no scheduler runs them here); return what they were."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        queued = session.query(DagRun).filter(DagRun.dag_id == dag_id, DagRun.state == "queued")
        found = [(run.run_id, run.state, run.triggering_user_name, run.conf) for run in queued]
        queued.delete()
    return found


def audit_entries(dag_id: str, *, drop: bool = False) -> list[tuple[str, str, dict[str, Any]]]:
    """The plugin's entries in Airflow's audit log for the DAG: (event, owner, extra)."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    with create_session() as session:
        query = session.query(Log).filter(Log.dag_id == dag_id, Log.event.like("migronaut_%"))
        found = [(row.event, row.owner, json.loads(row.extra)) for row in query.order_by(Log.id)]
        if drop:
            query.delete(synchronize_session=False)
    return found


@pytest.fixture(autouse=True)
def _fresh(airflow_db: Path) -> Iterator[None]:
    """Each test's database is new: drop the kits cached for earlier ones, and DAG runs
    and audit entries of the migration's DAG that other tests (or a resume here) left."""
    from migronaut_airflow.plugins.target import kits

    drop_runs(dag_id_for(SPLIT_NAME))
    audit_entries(dag_id_for(SPLIT_NAME), drop=True)
    yield
    kits.close()
    drop_runs(dag_id_for(SPLIT_NAME))


def seed(db: Database[dict[str, Any]], count: int) -> None:
    """Users whose every name carries the sentinel (a value that must never be shown)."""
    db.users.insert_many(
        [{"_id": i, "name": f"{SENTINEL}{i} Last{i}", "_v": 1} for i in range(count)]
    )


@pytest.fixture
def running(
    dags_folder: Path, migronaut_connection: str, mongo_uri: str, db: Database[dict[str, Any]]
) -> str:
    """A registered migration, planned and part-way through (status running)."""
    seed(db, 3_000)
    write_background(dags_folder, batch_size=100, max_parallel=2)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
        assert kit.background.coordinate(SPLIT_NAME).next == "process"
        kit.background.run_slice(SPLIT_NAME, slice_ms=100)
    return SPLIT_NAME


def state_of(db: Database[dict[str, Any]], name: str) -> dict[str, Any]:
    state = db.migronaut_background.find_one({"_id": name})
    assert state is not None
    return state


# -- authentication and authorization ---------------------------------------------------------

ROUTES = (
    ("GET", "/"),
    ("GET", "/migrations/anything"),
    ("GET", "/dags/migronaut_bg__anything"),
    ("GET", "/docs"),
    ("GET", "/static/common.js"),
    ("GET", "/openapi.json"),
    ("GET", "/api/migrations"),
    ("GET", "/api/migrations/anything"),
    ("GET", "/api/migrations/anything/failed"),
    ("POST", "/api/migrations/anything/actions/pause"),
)


def test_every_route_needs_a_signed_in_user(airflow: Airflow) -> None:
    for method, path in ROUTES:
        anonymous = airflow.client.request(method, UI + path, json={"reason": "x"})
        assert anonymous.status_code == 401, (method, path, anonymous.text)
        forged = airflow.client.request(
            method, UI + path, json={"reason": "x"}, headers={"Authorization": "Bearer nope"}
        )
        assert forged.status_code == 403, (method, path, forged.text)
    api = airflow.client.get(f"{UI}/api/migrations")
    assert api.json()["code"] == "NOT_AUTHENTICATED"
    assert api.json()["context"]["login_url"].endswith("/auth/login")
    page = airflow.client.get(f"{UI}/", headers={"Accept": "text/html"})
    assert page.status_code == 401
    assert "text/html" in page.headers["content-type"]
    assert "Sign in to Airflow" in page.text


def test_the_sign_in_cookie_opens_the_pages(airflow: Airflow, running: str) -> None:
    """The Airflow UI's ``_token`` cookie is enough: pages, assets and the API's fetches."""
    browser = airflow.client
    browser.cookies.set("_token", airflow.tokens["viewer"])
    try:
        listing = browser.get(f"{UI}/")
        assert listing.status_code == 200
        assert 'data-role="migrations"' in listing.text
        assert f'src="{UI}/static/list.js"' in listing.text
        assert f'src="{UI}/static/brake.js"' in listing.text and 'data-role="brake"' in listing.text
        assert "can_edit" in browser.get(f"{UI}/static/brake.js").text
        assert "frame-ancestors 'self'" in listing.headers["content-security-policy"]
        detail = browser.get(f"{UI}/migrations/{running}")
        assert detail.status_code == 200
        for action in ("pause", "resume", "cancel", "retry", "retry_from_start", "repin", "unlock"):
            assert f'data-action="{action}"' in detail.text
        assert '<dialog data-role="confirm"' in detail.text
        assert 'name="reason"' in detail.text
        assert 'data-role="history"' in detail.text
        script = browser.get(f"{UI}/static/detail.js")
        assert script.status_code == 200
        assert "javascript" in script.headers["content-type"]
        api = browser.get(f"{UI}/api/migrations")
        assert [m["name"] for m in api.json()["migrations"]] == [running]
        assert browser.get(f"{UI}/static/nothing.js").status_code == 404
    finally:
        browser.cookies.clear()


def test_the_dag_view_opens_the_migration(airflow: Airflow) -> None:
    mine = airflow.get(f"/dags/{dag_id_for('x_y')}", follow_redirects=False)
    assert mine.status_code == 303
    assert mine.headers["location"] == f"{UI}/migrations/x_y"
    other = airflow.get("/dags/some_other_dag")
    assert other.status_code == 200
    assert "is not a background migration" in other.text


def test_a_viewer_cannot_control(airflow: Airflow, running: str, db: Database[Any]) -> None:
    before = state_of(db, running)
    for action in ("pause", "cancel", "unlock"):
        answer = airflow.act(running, action, "viewer", {"reason": "I should not"})
        assert answer.status_code == 403, answer.text
        assert answer.json()["code"] == "FORBIDDEN"
        assert answer.json()["context"]["dag_id"] == dag_id_for(running)
    after = state_of(db, running)
    assert after["status"] == before["status"] == "running"
    assert after.get("history") == before.get("history")
    assert audit_entries(dag_id_for(running)) == []  # refused before any control ran
    detail = airflow.get(f"/api/migrations/{running}").json()
    assert detail["permissions"] == {"can_control": False, "can_trigger": False}


# -- reading ------------------------------------------------------------------------------------


def test_list_and_detail_show_progress(airflow: Airflow, running: str) -> None:
    listing = airflow.get("/api/migrations")
    assert listing.status_code == 200
    body = listing.json()
    assert body["total"] == 1
    assert "running" in body["statuses"]
    row = body["migrations"][0]
    assert row["name"] == running
    assert row["dag_id"] == dag_id_for(running)
    assert row["status"] == "running"
    assert row["pass"] == 1
    assert row["progress"]["estimate"] == 3_000
    assert 0 < row["processed"] == row["progress"]["done"] <= 3_000
    assert row["progress"]["percent"] == pytest.approx(100 * row["processed"] / 3_000, abs=0.1)
    assert row["max_parallel"] == 2
    assert row["collection"] == "users"
    assert (row["mode"], row["runs_as"]) == ("declarative", "python")
    assert row["failed_documents"] == 0
    assert row["waits_for"] == []
    assert set(row["throughput"]) == {
        "docs_per_second",
        "average_docs_per_second",
        "window_seconds",
        "series",
    }

    assert airflow.get("/api/migrations?status=paused").json()["migrations"] == []
    both = airflow.get("/api/migrations?status=paused,running").json()
    assert [m["name"] for m in both["migrations"]] == [running]

    detail = airflow.get(f"/api/migrations/{running}").json()
    assert detail["status"] == "running"
    assert detail["processed"] == sum(
        p["counters"].get("migrated", 0) for p in detail["partitions"]
    )
    assert len(detail["partitions"]) >= 1
    first = detail["partitions"][0]
    assert first["cursor"] in ("start", "moving", "end")
    assert first["scope"]["kind"]
    assert set(first) >= {"status", "scanned", "counters", "lease", "slice_failures"}
    for partition in detail["partitions"]:
        assert partition["lease"] is None or "token" not in partition["lease"]
    assert detail["throttle"]["batch_size"] == 100
    assert detail["throttle"]["pause_ms"] == 0
    assert detail["drift"] == {"watch": [], "reopened": 0}
    assert detail["plan"]["estimate"] == 3_000
    assert detail["permissions"] == {"can_control": False, "can_trigger": False}


def test_an_update_pipeline_migration_shows_its_mode(
    airflow: Airflow,
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
) -> None:
    name = "20240103000000_rename_name"
    (dags_folder / f"{name}.py").write_text(
        'background = {"collection": "users", "from": 1, "to": 2,\n'
        '              "update": [{"$set": {"full": "$name"}}, {"$unset": "name"}]}\n'
    )
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
    (row,) = airflow.get("/api/migrations").json()["migrations"]
    assert (row["name"], row["mode"], row["runs_as"]) == (name, "update", "update")
    detail = airflow.get(f"/api/migrations/{name}").json()
    assert (detail["mode"], detail["runs_as"]) == ("update", "update")
    page = airflow.get(f"/migrations/{name}")
    assert page.status_code == 200
    assert '<dd data-field="mode">' in page.text
    script = airflow.get("/static/common.js").text
    assert "update_many" in script and "runs_as" in script


def test_the_eta_and_average_rate_are_the_cores(
    airflow: Airflow, running: str, dags_folder: Path, mongo_uri: str, db: Database[Any]
) -> None:
    """The page shows the core's ETA and average (as the CLI does), never a guess of its own:
    with no start time to tell them by, both are unknown even though progress was sampled."""
    airflow.get("/api/migrations")
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.background.run_slice(running, slice_ms=100)
        db.migronaut_background.update_one(
            {"_id": running}, {"$unset": {"started_at": "", "pass_started_at": ""}}
        )
        core = kit_json.status(kit, running)
    time.sleep(1.6)  # the sampler's spacing: the next reading is a second sample
    row = airflow.get("/api/migrations").json()["migrations"][0]
    assert row["throughput"]["docs_per_second"] > 0
    assert core["status"] == "running"
    assert core["eta_seconds"] is None
    assert row["eta_seconds"] is None
    assert row["throughput"]["average_docs_per_second"] is None


def test_no_document_value_leaves_the_server(
    airflow: Airflow,
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
) -> None:
    """Names carry the sentinel, and a failing document carries it in its ``_id`` too."""
    seed(db, 500)
    db.users.insert_one({"_id": f"{SENTINEL}-id", "name": 7, "_v": 1})  # int: migrate() fails
    write_background(dags_folder, batch_size=50, max_parallel=2, extra='"max_document_errors": 5,')
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
        kit.background.run(SPLIT_NAME, concurrency=2)
        assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"
    assert SENTINEL in json.dumps(state_of(db, SPLIT_NAME), default=str)  # the state keeps it

    detail = airflow.get(f"/api/migrations/{SPLIT_NAME}")
    assert detail.json()["failed_documents"] == 1
    assert detail.json()["failure_reasons"] == [{"reason": "transform", "error": "AttributeError"}]
    answers = [
        airflow.get("/api/migrations"),
        detail,
        airflow.get(f"/migrations/{SPLIT_NAME}"),
        airflow.get("/"),
        airflow.get("/openapi.json"),
    ]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert SENTINEL not in answer.text


# -- controls -----------------------------------------------------------------------------------


def test_an_editor_pauses_and_resumes(airflow: Airflow, running: str, db: Database[Any]) -> None:
    paused = airflow.act(running, "pause", "editor", {"reason": "checkout latency\nabove SLO"})
    assert paused.status_code == 200, paused.text
    assert paused.json() | {"dag_run_note": None} == {
        "migration": running,
        "action": "pause",
        "applied": "changed",
        "status": "paused",
        "requested_by": "editor",
        "replan": None,
        "stopped": None,
        "lock": None,
        "leases": None,
        "checksum": None,
        "failed": None,
        "dag_run": None,
        "dag_run_note": None,
    }
    assert state_of(db, running)["status"] == "paused"
    again = airflow.act(running, "pause", "editor", {"reason": "twice"})
    assert again.json()["applied"] == "unchanged"

    resumed = airflow.act(running, "resume", "editor", {"reason": "latency is back to normal"})
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["status"] == "running"
    started, note = resumed.json()["dag_run"], resumed.json()["dag_run_note"]
    assert (started is None) != (note is None)  # a run, or why not (the DAG may be unknown)

    detail = airflow.get(f"/api/migrations/{running}", user="editor").json()
    assert detail["permissions"]["can_control"] is True
    controls = [entry for entry in detail["history"] if entry["by"] == "editor"]
    assert [(e["action"], e["from"], e["to"], e["reason"]) for e in controls] == [
        ("pause", "running", "paused", "checkout latency above SLO"),
        ("resume", "paused", "running", "latency is back to normal"),
    ]
    assert all(entry["at"] for entry in controls)
    history = state_of(db, running)["history"]
    assert history[-1]["by"] == "editor"

    def entry(reason: str, outcome: str, status: str) -> dict[str, Any]:
        return {"migration": running, "reason": reason, "outcome": outcome, "status": status}

    assert audit_entries(dag_id_for(running)) == [
        ("migronaut_pause", "editor", entry("checkout latency above SLO", "changed", "paused")),
        ("migronaut_pause", "editor", entry("twice", "unchanged", "paused")),
        ("migronaut_resume", "editor", entry("latency is back to normal", "changed", "running")),
    ]


def test_resume_starts_the_migration_dag(airflow: Airflow, running: str) -> None:
    """As the control DAG does: a run of ``migronaut_bg__<name>``, unless one is active."""
    sync_dags_to_airflow()
    dag_id = dag_id_for(running)
    drop_runs(dag_id)
    try:
        assert airflow.act(running, "pause", "editor", {"reason": "deploy"}).status_code == 200
        resumed = airflow.act(running, "resume", "editor", {"reason": "deploy done"}).json()
        assert resumed["dag_run"]["dag_id"] == dag_id
        assert isinstance(resumed["dag_run"]["dag_paused"], bool)
        airflow.act(running, "pause", "editor", {"reason": "again"})
        again = airflow.act(running, "resume", "editor", {"reason": "again"}).json()
        assert again["dag_run"] is None
        assert "queued or running run already" in again["dag_run_note"]
    finally:
        runs = drop_runs(dag_id)
    assert runs == [(resumed["dag_run"]["run_id"], "queued", "editor", {"reason": "resume"})]


def test_unlock_is_recorded_with_the_user(airflow: Airflow, running: str) -> None:
    unlocked = airflow.act(running, "unlock", "admin", {"reason": "lanes died with the node"})
    assert unlocked.status_code == 200, unlocked.text
    assert unlocked.json()["status"] == "running"
    assert unlocked.json()["leases"] == 0
    last = airflow.get(f"/api/migrations/{running}").json()["history"][-1]
    assert (last["action"], last["by"], last["reason"]) == (
        "unlock",
        "admin",
        "lanes died with the node",
    )
    assert last["details"] == {"lock": False, "leases": 0}


def test_a_repin_answers_the_checksum_it_pinned(
    airflow: Airflow, running: str, dags_folder: Path, db: Database[Any]
) -> None:
    path = dags_folder / f"{running}.py"
    path.write_text(path.read_text() + "\n# reviewed: a comment-only edit\n")
    repinned = airflow.act(running, "repin", "editor", {"reason": "comment-only edit"})
    assert repinned.status_code == 200, repinned.text
    assert repinned.json()["checksum"] == file_checksum(path) == state_of(db, running)["checksum"]


def test_bad_requests_change_nothing(airflow: Airflow, running: str, db: Database[Any]) -> None:
    before = state_of(db, running)
    blank = airflow.act(running, "pause", "editor", {"reason": "  \n "})
    assert blank.status_code == 400
    assert blank.json() == {
        "code": "CONFIG_INVALID",
        "message": "a reason is required",
        "context": {"key": "reason"},
    }
    assert airflow.act(running, "pause", "editor", {}).status_code == 400
    assert airflow.act(running, "explode", "editor", {"reason": "x"}).status_code == 400
    repin = airflow.act(running, "pause", "editor", {"reason": "x", "repin": True})
    assert repin.status_code == 400
    assert repin.json()["context"]["key"] == "repin"
    already = airflow.act(running, "resume", "editor", {"reason": "x"})
    assert already.json()["applied"] == "unchanged"  # running already: nothing to record
    assert airflow.get("/api/migrations?status=sleeping").status_code == 400
    assert state_of(db, running)["history"] == before["history"]
    assert state_of(db, running)["status"] == "running"


def test_unknown_migrations_and_conflicts(
    airflow: Airflow,
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
) -> None:
    seed(db, 200)
    write_background(dags_folder, batch_size=100, max_parallel=1)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
        kit.background.run(SPLIT_NAME)
    missing = airflow.get("/api/migrations/20990101000000_nothing")
    assert missing.status_code == 404
    assert missing.json()["code"] == "NOT_APPLIED"
    assert airflow.get("/migrations/20990101000000_nothing").status_code == 404
    acted = airflow.act("20990101000000_nothing", "pause", "editor", {"reason": "x"})
    assert acted.status_code == 404
    finished = airflow.act(SPLIT_NAME, "pause", "editor", {"reason": "too late"})
    assert finished.status_code == 409
    assert finished.json()["code"] == "BACKGROUND_CONFLICT"
    assert finished.json()["context"]["migration"] == SPLIT_NAME
    assert state_of(db, SPLIT_NAME)["status"] == "completed"
    assert audit_entries(dag_id_for(SPLIT_NAME)) == [
        (
            "migronaut_pause",
            "editor",
            {
                "migration": SPLIT_NAME,
                "reason": "too late",
                "outcome": "BACKGROUND_CONFLICT",
                "status": None,
            },
        )
    ]
    done = airflow.get("/api/migrations").json()["migrations"][0]
    assert (done["status"], done["progress"]["percent"]) == ("completed", 100.0)


# -- schema and registration --------------------------------------------------------------------


def test_an_unknown_connection_is_named_by_its_argument(
    airflow: Airflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIGRONAUT_CONN_ID", "no_such_mongo")
    answer = airflow.get("/api/migrations")
    assert answer.status_code == 503
    body = answer.json()
    assert body["code"] == "NOT_CONFIGURED"
    assert body["context"] == {"mongo_conn_id": "no_such_mongo"}


def test_the_openapi_schema_lists_the_routes(airflow: Airflow) -> None:
    schema = airflow.get("/openapi.json").json()
    assert schema["servers"] == [{"url": UI}]
    assert set(schema["paths"]) == {
        "/api/migrations",
        "/api/migrations/{name}",
        "/api/migrations/{name}/failed",
        "/api/migrations/{name}/actions/{action}",
        "/api/brake",
        "/api/brake/release",
    }
    act = schema["paths"]["/api/migrations/{name}/actions/{action}"]["post"]
    assert {"400", "401", "403", "404", "409"} <= set(act["responses"])
    assert {"MigrationSummary", "MigrationDetail", "ActionRequest", "ErrorBody"} <= set(
        schema["components"]["schemas"]
    )
    docs = airflow.get("/docs")
    assert docs.status_code == 200
    assert "/api/migrations/{name}/actions/{action}" in docs.text


def test_the_provider_registers_the_plugin() -> None:
    from airflow import plugins_manager

    from migronaut_airflow import get_provider_info
    from migronaut_airflow.plugins.plugin import URL_PREFIX, MigronautPlugin

    assert get_provider_info()["plugins"] == [
        {"name": "migronaut", "plugin-class": "migronaut_airflow.plugins.plugin.MigronautPlugin"}
    ]
    assert MigronautPlugin.fastapi_apps[0]["url_prefix"] == URL_PREFIX == UI
    apps, _ = plugins_manager.get_fastapi_plugins()  # the airflow.plugins entry point
    assert [app["url_prefix"] for app in apps if app["name"] == "migronaut"] == [UI]
    views = {view["destination"]: view for view in MigronautPlugin.external_views}
    assert views["nav"]["href"] == "migronaut/"
    assert views["dag"]["href"] == "migronaut/dags/{DAG_ID}"


def test_an_editor_approves_a_canary_and_it_is_audited(
    airflow: Airflow,
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
) -> None:
    seed(db, 200)
    canary = '"canary": {"fraction": 0.3, "approval": True},'
    write_background(dags_folder, batch_size=100, max_parallel=2, extra=canary)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
        assert step(kit, SPLIT_NAME).reason == "canary-approval"
    shown = airflow.get(f"/api/migrations/{SPLIT_NAME}", user="editor").json()
    assert shown["canary"]["phase"] == "awaiting_approval"

    approved = airflow.act(SPLIT_NAME, "approve", "editor", {"reason": "dashboards are green"})
    assert approved.status_code == 200, approved.text
    assert (approved.json()["applied"], approved.json()["status"]) == ("changed", "running")
    assert state_of(db, SPLIT_NAME)["canary"]["phase"] == "promoted"
    again = airflow.act(SPLIT_NAME, "reject", "editor", {"reason": "too late"})
    assert again.status_code == 409, again.text
    assert [event for event, _, _ in audit_entries(dag_id_for(SPLIT_NAME))] == [
        "migronaut_approve",
        "migronaut_reject",
    ]
