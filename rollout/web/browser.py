"""One headless Debian Chromium driven through Playwright's sync API, on a thread of its own.

Playwright's sync API is bound to the thread that started it, so every call of an environment
goes through `BrowserThread.call`, which also turns a browser failure (a screenshot Chromium
could not take under load, a crashed page) into the device's crash, which the runner retries
on a new page.
"""

from __future__ import annotations

import logging
import os
import struct
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from xml.sax.saxutils import escape

from rollout.sim.render import packaged_cjk_font
from trajforge.errors import DeviceCrashed

log = logging.getLogger("trajforge.web")

T = TypeVar("T")
CHROMIUM = "/usr/bin/chromium"
# Flags this closed network needs (no background connections) and a root user needs (no sandbox).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
]
# Lets a file:// page read any local file: only for a web suite that asks (`local_files: any`).
ANY_LOCAL_FILE = "--allow-file-access-from-files"


def chromium_env() -> dict[str, str | float | bool]:
    """Chromium's environment: fontconfig sees the system fonts plus the CJK font that comes with
    trajforge's Python dependencies, so pages with Chinese text render on a machine without a
    system CJK font package."""
    env: dict[str, str | float | bool] = dict(os.environ)
    font = packaged_cjk_font()
    if font is None:
        return env
    conf = Path(tempfile.gettempdir()) / f"trajforge-fonts-{os.getuid()}.conf"
    text = (
        '<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig>\n'
        '  <include ignore_missing="yes">/etc/fonts/fonts.conf</include>\n'
        f"  <dir>{escape(str(Path(font).parent))}</dir>\n</fontconfig>\n"
    )
    if not conf.is_file() or conf.read_text() != text:
        partial = conf.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(text)
        partial.replace(conf)
    env["FONTCONFIG_FILE"] = str(conf)
    return env


def chromium_available() -> bool:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return False
    return Path(CHROMIUM).is_file()


def png_size(png: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", png[16:24])
    return int(width), int(height)


class BrowserThread:
    """A browser with one page; `context` takes Playwright's `new_context` options (a device
    profile, a viewport), `args` Chromium flags beyond `CHROMIUM_ARGS`. `close()` ends it."""

    def __init__(
        self, context: Callable[[Any], dict[str, Any]], timeout_ms: int = 15_000, args: Sequence[str] = ()
    ) -> None:
        self._args = [*CHROMIUM_ARGS, *args]
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="webenv")
        self._context_options = context
        self.timeout_ms = timeout_ms
        self.call(self._launch)

    def call(self, fn: Callable[[], T]) -> T:
        """`fn` on the browser's thread."""
        from playwright.sync_api import Error as BrowserError

        try:
            return self._thread.submit(fn).result()
        except BrowserError as exc:
            raise DeviceCrashed(f"Chromium: {str(exc).splitlines()[0]}") from exc

    def _launch(self) -> None:
        from playwright.sync_api import sync_playwright

        self.pw = sync_playwright().start()
        self.browser = self.pw.chromium.launch(
            executable_path=CHROMIUM, args=self._args, headless=True, env=chromium_env()
        )
        self.context = self.browser.new_context(**self._context_options(self.pw))
        self.page = self.context.new_page()
        self.page.set_default_timeout(self.timeout_ms)

    def close(self) -> None:
        def stop() -> None:
            self.browser.close()
            self.pw.stop()

        try:
            self.call(stop)
        except DeviceCrashed as exc:  # a crashed browser is closed already, as far as it can be
            log.warning("closing a crashed browser: %s", exc)
        finally:
            self._thread.shutdown()
