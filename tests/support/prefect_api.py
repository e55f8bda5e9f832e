"""One real Prefect API server per test worker, for the loop tests whose subject is not Prefect.

Each `trajforge evolve` with no `PREFECT_API_URL` starts Prefect's temporary server, which imports
Prefect's server and migrates a fresh database in the home: about 18 s of CPU of a tiny round's 70.
The loop tests (MiniWoB++, desktop, BrowserGym, the web backend, a suite package, the real model
server) point their runs at this server instead, as a production user's runs point at the
compose file's. The temporary server itself stays covered where it is the subject: the kill and
SIGTERM tests (tests/flows/test_kill_resume.py), the watchdog (test_server_watchdog.py), a server
that does not start (test_slow_machine.py) and the CLI tests.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .processes import server_process

PREFECT = str(Path(sys.executable).with_name("prefect"))


@contextmanager
def prefect_server(folder: Path, port: int) -> Iterator[str]:
    """`prefect server start` on 127.0.0.1:`port` with its state in `folder`: its API URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"PREFECT_HOME": str(folder), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    url = f"http://127.0.0.1:{port}/api"
    args = [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with server_process(args, env, url, folder / "server.log", timeout_s=180, start_new_session=True):
        yield url
