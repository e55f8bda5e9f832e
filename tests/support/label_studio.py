"""A real Label Studio server for the tests, and a browser session on it.

`.ci/run` installs label-studio 1.23.2 into its own virtualenv and exports
TRAJFORGE_TEST_LS_BIN; the session fixture starts it on 127.0.0.1 with a preset user and
legacy token. TRAJFORGE_TEST_LS_URL (plus _TOKEN, _USERNAME, _PASSWORD) reuses a server
that is already running instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

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
    """Start `label-studio` on 127.0.0.1:port with its own SQLite data dir; stop it afterwards.

    The data dir starts as a copy of `template(binary)`: a database this install has already
    migrated, with the test user and token in it. A fresh database's migrations took 75-150 s of
    CPU per start (over 240 s in a loaded slow tier), in every worker that starts a server."""
    shutil.copytree(template(binary, port), data_dir, dirs_exist_ok=True)
    with _running(binary, data_dir, port, timeout_s) as server:
        yield server


def template(binary: str, port: int, timeout_s: float = 600) -> Path:
    """A data dir that `binary` has started on once (migrated, the test user made), kept in the cache
    for this install and built by one test process at a time (later runs and workers reuse it)."""
    resolved = Path(binary).resolve()
    key = hashlib.sha256(f"{resolved}:{resolved.stat().st_mtime_ns}:{TOKEN}".encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trajforge"
    folder = cache / f"label-studio-template-{key}"
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{folder}.lock"):
        if not folder.is_dir():
            building = Path(tempfile.mkdtemp(prefix=f"{folder.name}-", dir=cache))
            try:
                with _running(binary, building, port, timeout_s):
                    pass
                (building / "server.log").unlink()
                building.rename(folder)  # whole or not at all: a build that failed leaves nothing
            finally:
                shutil.rmtree(building, ignore_errors=True)
    return folder


@contextmanager
def _running(binary: str, data_dir: Path, port: int, timeout_s: float) -> Iterator[LabelStudioServer]:
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
