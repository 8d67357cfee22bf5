"""Headless Chromium (Debian's ``chromium`` and ``chromium-driver``) driven by Selenium.

The browser tests use the browser and the driver the system's packages install
(``scripts/test.sh`` installs them on a machine that has neither): Selenium talks
to ``/usr/bin/chromedriver``, which starts ``/usr/bin/chromium``, both of one
version, so nothing is downloaded at run time. Chromium gets a fresh profile and
flags that keep it off the network (the test machines have none) and out of the
GPU and the sandbox (we run as root in a container).

:class:`Browser` signs in through Airflow's real login form, waits on the page
the way a person would (polling what is shown) and saves a screenshot at each step.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote, urlsplit

import pytest

CHROMIUM = Path(os.environ.get("MIGRONAUT_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("MIGRONAUT_CHROMEDRIVER", "/usr/bin/chromedriver"))
#: Headless, no sandbox (root in a container), no GPU and nothing that phones home.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1440,900",
)
ROOT = Path(__file__).resolve().parents[2]
#: Where the browser tests leave their screenshots (ignored by git).
OUTPUT_ROOT = Path(os.environ.get("MIGRONAUT_TEST_OUTPUT", ROOT / "test-output"))


def require_chromium() -> None:
    """Fail (not skip) when the browser, its driver or Selenium is missing."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        pytest.fail(
            f"headless Chromium is not installed ({', '.join(missing)} missing): "
            "`apt-get install -y chromium chromium-driver` (scripts/test.sh does it as root)",
            pytrace=False,
        )
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.fail("selenium is not installed: run `bash scripts/test.sh` once", pytrace=False)


def output_dir(name: str) -> Path:
    """A fresh folder for one test's screenshots, ``test-output/<name>``."""
    folder = OUTPUT_ROOT / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


class BrowserError(AssertionError):
    """The page did not show what it should in time."""


class Browser:
    """One headless Chromium session; screenshots go to ``out_dir``.

    :param base_url: the Airflow API server, e.g. ``http://127.0.0.1:8080``.
    """

    def __init__(self, base_url: str, out_dir: Path, *, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.out_dir = out_dir
        self.timeout = timeout
        self.shots: list[Path] = []
        self._profile = Path(tempfile.mkdtemp(prefix="migronaut-chromium-"))
        self._driver: Any = None

    # -- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> Self:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self._profile}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        log = self.out_dir / f"chromedriver-{self._profile.name}.log"
        service = Service(str(CHROMEDRIVER), log_output=str(log))
        self._driver = webdriver.Chrome(options=options, service=service)
        self._driver.set_page_load_timeout(self.timeout)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is not None and self._driver is not None:
                self.dump("failure")
        finally:
            if self._driver is not None:
                with contextlib.suppress(Exception):
                    self._driver.quit()
                self._driver = None
            shutil.rmtree(self._profile, ignore_errors=True)

    @property
    def driver(self) -> Any:
        if self._driver is None:
            raise RuntimeError("the browser is not started")
        return self._driver

    # -- pages ------------------------------------------------------------------------

    def open(self, path: str) -> None:
        """Load a path of the API server, a second time if it did not load in time.

        On a busy machine Airflow's API server can stall for half a minute (its
        SQLite metadata DB is shared by every Airflow process).
        """
        from selenium.common.exceptions import TimeoutException

        try:
            self.driver.get(f"{self.base_url}{path}")
        except TimeoutException:
            self.driver.get(f"{self.base_url}{path}")

    @property
    def path(self) -> str:
        """The path (and query) of the page shown."""
        parts = urlsplit(self.driver.current_url)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    def sign_in(self, username: str, password: str, next_path: str = "/") -> None:
        """Sign in through the auth manager's login form and land on ``next_path``."""
        from selenium.webdriver.common.by import By

        self.open(f"/auth/login?next={quote(next_path, safe='')}")
        user_box = self.wait_for_element("input[name='username']")
        user_box.send_keys(username)
        self.driver.find_element(By.CSS_SELECTOR, "input[name='password']").send_keys(password)
        submit = self.driver.find_element(By.CSS_SELECTOR, "button[type='submit']")
        self.wait_until(submit.is_enabled, "the sign-in button is enabled", timeout=10)
        self.shot("login")
        submit.click()
        self.wait_until(
            lambda: not self.path.startswith("/auth/"), f"signed in as {username}", timeout=30
        )

    def cookie(self, name: str) -> str | None:
        found = self.driver.get_cookie(name)
        return None if found is None else str(found["value"])

    # -- elements ---------------------------------------------------------------------

    def find(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def wait_for_element(
        self, css: str, *, visible: bool = True, timeout: float | None = None
    ) -> Any:
        """The first element matching ``css`` (once shown, if ``visible``)."""

        def found() -> Any:
            for element in self.find(css):
                with contextlib.suppress(Exception):
                    if not visible or element.is_displayed():
                        return element
            return None

        return self.wait_until(found, f"an element {css!r}", timeout=timeout)

    def text(self, css: str) -> str | None:
        """The shown text of the first element matching ``css``, stripped; None if absent.

        Read in one script call, so a page that re-renders while polling cannot hand
        back a stale element.
        """
        shown = self.driver.execute_script(
            "const found = document.querySelector(arguments[0]);"
            "return found === null ? null : found.innerText;",
            css,
        )
        return None if shown is None else str(shown).strip()

    def by_text(self, css: str, text: str) -> Any:
        """The first element matching ``css`` whose shown text is ``text``, or None."""
        return self.driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]))"
            ".find((e) => e.innerText.trim() === arguments[1]) || null;",
            css,
            text,
        )

    def texts(self, css: str) -> list[str]:
        """The shown text of every element matching ``css``, stripped."""
        shown = self.driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]), (e) => e.innerText);",
            css,
        )
        return [str(text).strip() for text in shown or []]

    def click(self, css: str, *, text: str | None = None, timeout: float | None = None) -> None:
        """Click the first shown element matching ``css`` (and showing ``text``, if given).

        Again if the page replaced it meanwhile (these pages re-render as they poll).
        """
        from selenium.common.exceptions import StaleElementReferenceException

        def clicked() -> bool:
            try:
                if text is None:
                    element = self.wait_for_element(css, timeout=timeout)
                else:
                    element = self.by_text(css, text)
                    if element is None or not element.is_displayed():
                        return False
                element.click()
            except StaleElementReferenceException:
                return False
            return True

        what = f"a clickable {css!r}" + (f" showing {text!r}" if text else "")
        self.wait_until(clicked, what, timeout=timeout)

    def number(self, css: str) -> float | None:
        """The first number in the text of ``css`` (``42%`` -> 42.0, ``1,200`` -> 1200.0)."""
        shown = self.text(css)
        if not shown:
            return None
        match = re.search(r"-?\d[\d,]*(?:\.\d+)?", shown)
        return float(match.group().replace(",", "")) if match else None

    def wait_until(
        self, check: Callable[[], Any], what: str, *, timeout: float | None = None
    ) -> Any:
        """Poll ``check`` every 0.25 s until it returns something truthy; that value."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"the page never showed {what} (at {self.path})")
            time.sleep(0.25)

    # -- evidence ---------------------------------------------------------------------

    def shot(self, name: str, *, full_page: bool = False) -> Path:
        """Save a screenshot as ``NN-name.png`` (the whole page if ``full_page``); its path."""
        target = self._next_shot(name)
        size = self.driver.get_window_size()
        if full_page:
            # The page may scroll inside an element rather than the document: grow the
            # window by the most any element has hidden below its fold.
            hidden = self.driver.execute_script(
                "return Math.max(0, ...Array.from(document.querySelectorAll('*'),"
                " (e) => e.scrollHeight - e.clientHeight));"
            )
            self.driver.set_window_size(size["width"], size["height"] + int(hidden) + 20)
            time.sleep(0.3)  # let it lay the page out again
        try:
            if not self.driver.save_screenshot(str(target)):
                raise BrowserError(f"could not save {target}")
        finally:
            if full_page:
                self.driver.set_window_size(size["width"], size["height"])
        self.shots.append(target)
        return target

    def _next_shot(self, name: str) -> Path:
        """``NN-name.png``, numbered after every screenshot already in the folder."""
        taken = len(list(self.out_dir.glob("[0-9][0-9]-*.png")))
        return self.out_dir / f"{taken + 1:02d}-{name}.png"

    def console(self) -> list[str]:
        """The browser console's messages so far."""
        with contextlib.suppress(Exception):
            entries = self.driver.get_log("browser")
            return [f"{entry['level']} {entry['message']}" for entry in entries]
        return []

    def dump(self, name: str) -> None:
        """Leave a screenshot, the page's HTML and the console next to the other shots."""
        with contextlib.suppress(Exception):
            self.shot(name)
        with contextlib.suppress(Exception):
            (self.out_dir / f"{name}.html").write_text(self.driver.page_source)
        with contextlib.suppress(Exception):
            (self.out_dir / f"{name}-console.log").write_text("\n".join(self.console()) + "\n")
