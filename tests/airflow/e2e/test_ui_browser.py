"""The migrations page in a real browser, against ``airflow standalone`` on loopback.

Headless Chromium (Debian's package, driven by Selenium through Debian's
chromedriver) signs in through Airflow's own login form as a non-admin user,
opens the plugin's list page while a background migration runs under its DAG,
sees its progress move, opens its detail page, pauses it with a reason and sees
it stop, the history naming the user and the reason. A screenshot of each step
lands in ``test-output/ui_browser/`` (``MIGRONAUT_TEST_OUTPUT`` moves it);
``MIGRONAUT_UPDATE_DOCS_IMG=1`` also copies the ones the docs show to ``docs/img/``.

The migration sleeps for each document so that it runs long enough to watch:
about two minutes of work, which the test pauses well within its first minute.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_airflow.operators.background import dag_id_for
from migronaut_core import Migronaut
from migronaut_dev.airflow_standalone import AirflowStandalone
from tests.support import kit_json
from tests.support.background import seed_users, write_background
from tests.support.browser import (
    ROOT,
    Browser,
    output_dir,
    require_chromium,
)
from tests.support.standalone import Ground, Standalone, running_standalone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

NAME = "20260103000000_split_user_names"
USERS = 6_000
BATCH_SIZE = 20
LANES = 2
#: 25 ms a document: two lanes move 40-80 documents a second (75-150 s for all).
SLOW_SPLIT = f"""
import time

description = "Split name into first and last (users _v 1 -> 2)"

background = {{
    "collection": "users",
    "from": 1,
    "to": 2,
    "batch_size": {BATCH_SIZE},
    "max_parallel": {LANES},
    "slice_ms": 20_000,
}}


def migrate(doc, ctx):
    time.sleep(0.025)
    first, _, last = doc.pop("name", "").partition(" ")
    doc["first"] = first
    doc["last"] = last
    return doc
"""
DAG_OPTIONS = (
    "lane_retry_delay=timedelta(seconds=1), no_lease_grace_seconds=5.0, "
    "poll_interval=1.0, migronaut_config={'lock_ttl_seconds': 10}, "
    # Paused at creation, as Airflow's default has it: these tests unpause what they run.
    "paused_upon_creation=None"
)
#: The signed-in user: a non-admin who may edit DAGs (SimpleAuthManager's ``user`` role).
USER, ROLE = "alice", "user"
REASON = "Pausing for the nightly backup window"
#: Where the plugin's pages are served, and how often they poll its JSON API.
PREFIX = "/migronaut"
POLL_SECONDS = 2.0
#: The list page's screenshot waits for this much progress (a bar worth seeing).
SHOWN_PERCENT = 10
#: Screenshots the docs show: docs/img/<name> <- the step that took it.
DOCS_IMAGES = {
    "ui-list.png": "list",
    "ui-detail.png": "running",
    "ui-pause-dialog.png": "confirm",
    "ui-paused.png": "paused",
    "ui-nav.png": "nav",
}
#: The second user's password (SimpleAuthManager's passwords file), new each run.
PASSWORD = secrets.token_urlsafe(12)
#: Names of the screenshots taken, by step, for DOCS_IMAGES.
SHOTS: dict[str, Path] = {}


@dataclass
class Site:
    airflow: AirflowStandalone
    db: Database[dict[str, Any]]
    kit: Migronaut
    password: str
    out: Path

    def status(self) -> dict[str, Any]:
        return dict(kit_json.status(self.kit, NAME))

    def migrated(self) -> int:
        return self.db.users.count_documents({"_v": 2})


@pytest.fixture(scope="module")
def standalone(
    tmp_path_factory: pytest.TempPathFactory,
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
) -> Iterator[Standalone]:
    """A registered, slow background migration and Airflow with a second user, signed out."""
    require_chromium()

    def seed(ground: Ground) -> None:
        seed_users(ground.db, USERS)
        ground.db.users.create_index([("_v", 1), ("_id", 1)])
        write_background(ground.migrations, NAME, body=SLOW_SPLIT)
        # SimpleAuthManager keeps passwords in this file and only adds missing users.
        ground.home.mkdir()
        (ground.home / "simple_auth_manager_passwords.json.generated").write_text(
            json.dumps({"admin": secrets.token_urlsafe(12), USER: PASSWORD})
        )

    # The kit's up registers the background migration; its DAG runs it.
    with running_standalone(
        tmp_path_factory,
        "ui_browser",
        mongo_uri,
        mongo_client,
        DAG_OPTIONS,
        seed=seed,
        kit={},
        env={"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"admin:admin,{USER}:{ROLE}"},
    ) as standalone:
        yield standalone


@pytest.fixture(scope="module")
def site(standalone: Standalone) -> Site:
    return Site(
        standalone.airflow, standalone.db, standalone.kit, PASSWORD, output_dir("ui_browser")
    )


def more_on_failure(standalone: Standalone, request: pytest.FixtureRequest) -> str:
    """After a failed test (tests/airflow/e2e/conftest.py): where the screenshots are."""
    return f"\nscreenshots: {request.getfixturevalue('site').out}"


ROW = f"[data-migration='{NAME}']"


def _field(browser: Browser, field: str, scope: str = "") -> float | None:
    """A number the page shows in ``[data-field=field]`` (within ``scope``)."""
    return browser.number(f"{scope} [data-field='{field}']".strip())


def _status(browser: Browser, scope: str = "") -> str:
    return (browser.text(f"{scope} [data-field='status']".strip()) or "").lower()


def _grows(browser: Browser, read: Any, what: str, timeout: float = 60.0) -> tuple[float, float]:
    """Two readings of a number on the page, both above 0 (polled), the second larger."""
    first = browser.wait_until(lambda: (value := read()) and (value,), what, timeout=timeout)[0]
    second = browser.wait_until(
        lambda: (value := read()) is not None and value > first and (value,),
        f"{what} grow past {first}",
        timeout=timeout,
    )[0]
    return first, second


def _history_entry(browser: Browser) -> str | None:
    """The history entry naming the user and the reason, if shown."""
    shown = browser.texts("[data-role='history'] li")
    return next((text for text in shown if REASON in text and USER in text), None)


def test_sign_in_watch_progress_and_pause_with_a_reason(site: Site) -> None:
    airflow, dag_id = site.airflow, dag_id_for(NAME)
    airflow.wait_for_dag(dag_id)
    airflow.unpause(dag_id)

    with Browser(airflow.url, site.out) as browser:
        browser.sign_in(USER, site.password, next_path=f"{PREFIX}/")
        assert browser.cookie("_token"), "signing in set no _token cookie"
        assert browser.path.startswith(f"{PREFIX}/"), browser.path
        browser.wait_for_element(ROW)  # registered, waiting for its DAG

        # Its DAG starts; the list page shows it running, its percentage moving.
        airflow.trigger(dag_id, {"reason": "browser test"})
        started = time.monotonic()

        def elapsed() -> str:
            return f"{time.monotonic() - started:.0f}s after the trigger"

        browser.wait_until(lambda: _status(browser, ROW) == "running", "it running", timeout=120)
        before, after = _grows(browser, lambda: _field(browser, "percent", ROW), "a percentage")
        print(f"\nlist page: {before}% -> {after}% ({elapsed()})")
        browser.wait_until(
            lambda: (_field(browser, "percent", ROW) or 0) >= SHOWN_PERCENT,
            f"{SHOWN_PERCENT}% done",
            timeout=90,
        )
        SHOTS["list"] = browser.shot("list")

        # The detail page, through the list's link: the processed documents moving.
        browser.click(f"{ROW} a[href]")
        browser.wait_until(
            lambda: browser.path.rstrip("/") == f"{PREFIX}/migrations/{NAME}", "the detail page"
        )
        before, after = _grows(browser, lambda: _field(browser, "processed"), "processed documents")
        print(f"detail page: processed {before:.0f} -> {after:.0f} ({elapsed()})")
        assert _status(browser) == "running"
        SHOTS["running"] = browser.shot("detail-running", full_page=True)

        # Pause, with a reason, through the confirmation dialog.
        browser.click("button[data-action='pause']")
        browser.wait_for_element("dialog[data-role='confirm']")
        browser.wait_for_element("dialog[data-role='confirm'] textarea[name='reason']").send_keys(
            REASON
        )
        SHOTS["confirm"] = browser.shot("pause-confirm")
        browser.click("dialog[data-role='confirm'] button[data-role='submit']")
        browser.wait_until(lambda: _status(browser) == "paused", "the status paused")
        at_pause = _field(browser, "processed") or 0
        print(f"paused at {at_pause:.0f} processed documents ({elapsed()})")
        entry = browser.wait_until(
            lambda: _history_entry(browser), "the history naming the user and the reason"
        )
        print(f"history: {entry!r}")
        assert not browser.text("[data-role='error']"), browser.text("[data-role='error']")

        # The lanes stop before their next batch: at most one more batch each lands.
        airflow.wait_until(lambda: site.status()["live_leases"] == 0, 60, "the lanes kept going")
        time.sleep(POLL_SECONDS * 2.5)  # the page has polled since
        settled = _field(browser, "processed") or 0
        assert settled - at_pause <= BATCH_SIZE * LANES, (at_pause, settled)
        migrated = site.migrated()
        time.sleep(POLL_SECONDS * 3)
        assert _field(browser, "processed") == settled, "processed kept growing after the pause"
        assert site.migrated() == migrated < USERS
        assert _status(browser) == "paused"
        SHOTS["paused"] = browser.shot("detail-paused", full_page=True)

    status = site.status()
    assert status["status"] == "paused", status
    last = kit_json.history(site.kit, NAME)[-1]
    assert (last.get("by"), last.get("reason")) == (USER, REASON), last
    print(f"{settled:.0f} of {USERS} documents processed; done {elapsed()}")


def test_the_page_sits_in_airflows_navigation(site: Site) -> None:
    """The plugin's external view: an entry in Airflow's nav that shows the list page."""
    plugins = site.airflow.request("GET", "/api/v2/plugins")["plugins"]
    views = [
        view
        for plugin in plugins
        for view in plugin.get("external_views") or []
        if str(view.get("href", "")).strip("/") == PREFIX.strip("/")
    ]
    assert views, f"no external view links to {PREFIX}/: {plugins}"
    name, route = views[0]["name"], views[0].get("url_route")
    with Browser(site.airflow.url, site.out) as browser:
        browser.sign_in(USER, site.password, next_path="/")
        browser.click("nav a, a, button", text=name)  # the entry in Airflow's nav
        if route:
            # Airflow mirrors the frame's own path after it: /plugin/<route>/<frame path>.
            page = f"/plugin/{route}"
            browser.wait_until(
                lambda: browser.path == page or browser.path.startswith(f"{page}/"), page
            )
        browser.driver.switch_to.frame(browser.wait_for_element("iframe"))
        try:
            browser.wait_for_element(ROW)  # the list page, inside Airflow's frame
            browser.wait_until(lambda: _field(browser, "percent", ROW), "a percentage")
        finally:
            browser.driver.switch_to.default_content()
        SHOTS["nav"] = browser.shot("nav")


def test_the_brake_is_set_and_released_from_the_list_page(site: Site) -> None:
    """The brake panel: a reason and the button brake every migration of the target (the
    kit reads it on), the panel says so and logs it; Release lifts it."""
    brake_reason = "INC-42: primary under pressure"
    with Browser(site.airflow.url, site.out) as browser:
        browser.sign_in(USER, site.password, next_path=f"{PREFIX}/")
        field = browser.wait_for_element("[data-role='brake-form'] input[name='reason']")
        field.send_keys(brake_reason)
        browser.click("button[data-role='brake-set']")
        browser.wait_until(
            lambda: "Brake on" in (browser.text("[data-role='brake-state']") or ""),
            "the panel showing the brake on",
        )
        try:
            brake = site.kit.background.brake_status()
            assert (brake.on, brake.requested_by, brake.reason) == (True, USER, brake_reason)
            assert brake_reason in (browser.text("[data-role='brake-state']") or "")
            SHOTS["brake"] = browser.shot("brake-on")
            browser.wait_for_element("[data-role='brake-form'] input[name='reason']").send_keys(
                "resolved"
            )
            browser.click("button[data-role='brake-release']")
            browser.wait_until(
                lambda: (browser.text("[data-role='brake-state']") or "").startswith("Off"),
                "the panel showing the brake off",
            )
        finally:
            site.kit.background.release(requested_by="test", reason="cleanup")
        assert not browser.text("[data-role='brake-error']"), browser.text(
            "[data-role='brake-error']"
        )
    log = [(e.action, e.requested_by, e.reason) for e in site.kit.background.brake_log()]
    assert log[-2:] == [("brake", USER, brake_reason), ("release", USER, "resolved")]


def teardown_module() -> None:
    """Copy the screenshots the docs show, when asked to."""
    if os.environ.get("MIGRONAUT_UPDATE_DOCS_IMG") != "1":
        return
    target = ROOT / "docs" / "img"
    target.mkdir(parents=True, exist_ok=True)
    for name, step in DOCS_IMAGES.items():
        if step in SHOTS and SHOTS[step].exists():
            shutil.copyfile(SHOTS[step], target / name)
