"""A suite's own folder, served read-only on a loopback address, so its page reads only that folder.

A page opened as `file://` in Chromium with `--allow-file-access-from-files` may `fetch` any local
file, which a suite hook could then put into a query and an export. trajforge instead opens a
`file://` suite page from `http://127.0.0.1:PORT/` (one server per folder and process): the page's
scripts, styles and data under its folder load as before, and everything else is out of reach,
because Chromium keeps an http page from reading `file://` URLs and this server answers 404 for a
path outside its folder (through `..` or a symbolic link) and for folder listings.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from trajforge.errors import ConfigError

log = logging.getLogger("trajforge.web")
TASK = "{task}"


class _FolderHandler(SimpleHTTPRequestHandler):
    root: Path

    def send_head(self) -> Any:
        wanted = Path(self.translate_path(self.path)).resolve()
        if wanted != self.root and self.root not in wanted.parents:
            self.send_error(404, "outside the suite's folder")
            return None
        return super().send_head()

    def list_directory(self, path: str | os.PathLike[str]) -> None:
        self.send_error(404, "no folder listings")
        return None

    def log_message(self, format: str, *args: object) -> None:
        log.debug("suite files: " + format, *args)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that drops its connection mid-answer (a page closed while its favicon loads) is
        no fault of the suite's; anything else is logged, not printed over the command's own output."""
        if isinstance(sys.exc_info()[1], ConnectionError):  # broken pipe, connection reset or aborted
            return
        log.warning("suite files: answering %s failed", client_address, exc_info=True)


class FolderServer:
    """`root` served at `url` until the process ends (a daemon thread)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        handler = type("Handler", (_FolderHandler,), {"root": self.root})
        self._server = _QuietServer(("127.0.0.1", 0), partial(handler, directory=str(self.root)))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, name="suite-files", daemon=True).start()


_servers: dict[Path, FolderServer] = {}
_lock = threading.Lock()


def served(root: Path) -> FolderServer:
    with _lock:
        key = root.resolve()
        if key not in _servers:
            _servers[key] = FolderServer(key)
        return _servers[key]


def file_uri(path: Path) -> str:
    """`path` as a file:// URL, `{task}` kept as it is."""
    return path.resolve().as_uri().replace(quote(TASK), TASK)


def folder_url(url: str, root: Path | None = None) -> str:
    """A `file://` page URL (which may hold `{task}`) as the same page under `root`'s server; `root`
    defaults to the page's own folder, the deepest one above the first `{task}`."""
    path = unquote(urlsplit(url).path)
    fixed = path.split(TASK, 1)[0]
    if root is None:
        root = Path(fixed if fixed.endswith("/") else Path(fixed).parent)
    root = root.resolve()
    folder, _, name = fixed.rpartition("/")
    page = f"{Path(folder or '/').resolve().as_posix().rstrip('/')}/{name}{path[len(fixed) :]}"
    if not page.startswith(root.as_posix().rstrip("/") + "/"):
        raise ConfigError(f"web suite page {url} is outside its folder {root}; move it there or set `root:`")
    return served(root).url + "/" + quote(page[len(root.as_posix().rstrip("/")) + 1 :], safe="/{}")
