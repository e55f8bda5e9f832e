"""A real Label Studio server for the tests, and a browser session on it.

`.ci/run` installs label-studio 1.23.2 into its own virtualenv and exports
TRAJFORGE_TEST_LS_BIN; the session fixture starts it on 127.0.0.1 with a preset user and
legacy token. TRAJFORGE_TEST_LS_URL (plus _TOKEN, _USERNAME, _PASSWORD) reuses a server
that is already running instead.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import server_process

USERNAME = "annotator@trajforge.test"
PASSWORD = "trajforge-ls-pass"
TOKEN = "trajforgetesttoken0123456789abcdef01"


@dataclass(frozen=True)
class LabelStudioServer:
    url: str
    token: str
    username: str
    password: str


def running_server() -> LabelStudioServer | None:
    url = os.environ.get("TRAJFORGE_TEST_LS_URL")
    if not url:
        return None
    return LabelStudioServer(
        url,
        os.environ.get("TRAJFORGE_TEST_LS_TOKEN", TOKEN),
        os.environ.get("TRAJFORGE_TEST_LS_USERNAME", USERNAME),
        os.environ.get("TRAJFORGE_TEST_LS_PASSWORD", PASSWORD),
    )


def label_studio_bin() -> str | None:
    return os.environ.get("TRAJFORGE_TEST_LS_BIN") or shutil.which("label-studio")


@contextmanager
def serve(binary: str, data_dir: Path, port: int, timeout_s: float = 600) -> Iterator[LabelStudioServer]:
    """Start `label-studio` on 127.0.0.1:port with a fresh SQLite data dir; stop it afterwards. Its
    first start migrates that database, which takes minutes on a loaded 2-core machine (a CI slow
    tier with four workers took over 240 s), hence the long wait."""
    env = {
        **os.environ,
        "LABEL_STUDIO_USERNAME": USERNAME,
        "LABEL_STUDIO_PASSWORD": PASSWORD,
        "LABEL_STUDIO_USER_TOKEN": TOKEN,
        "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
        "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir),
        "DJANGO_DB": "sqlite",
        "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
    }
    data_dir.mkdir(parents=True, exist_ok=True)
    args = [
        binary,
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-browser",
        "--data-dir",
        str(data_dir),
    ]
    url = f"http://127.0.0.1:{port}"
    with server_process(args, env, url, data_dir / "server.log", timeout_s):
        yield LabelStudioServer(url, TOKEN, USERNAME, PASSWORD)


@contextmanager
def logged_in_page(server: LabelStudioServer) -> Iterator[Any]:
    """A Playwright page in Debian's Chromium, logged in to Label Studio."""
    from playwright.sync_api import sync_playwright

    from rollout.web.browser import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{server.url}/user/login/")
            page.fill("input[name=email]", server.username)
            page.fill("input[name=password]", server.password)
            page.click("button[type=submit]")
            page.wait_for_url(lambda u: "/user/login" not in u, timeout=30_000)
            yield page
        finally:
            browser.close()
