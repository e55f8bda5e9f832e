"""A server the tests start as a subprocess: up when its /health answers 200, stopped after."""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

# Prefect's temporary API server on CI's two cores under the slow tier's four workers: trajforge's
# default wait of 120 s was once not enough (the MiniWoB++ suite loop at stop 81). Every command a
# test starts waits longer; a server that really cannot start is tested in test_slow_machine.py.
LOADED_MACHINE = {"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "600"}


def child_env(*drop: str, shared_prefect: bool = False) -> dict[str, str]:
    """The environment for a command a test starts: this process's, less the variables whose names
    start with one of `drop` (a user's TRAJFORGE_ settings, a PREFECT_API_URL), with the loaded
    machine's Prefect start timeout.

    `shared_prefect`: a `trajforge evolve` it starts reports to this test process's Prefect server
    (`shared_prefect_api`), as a deployment's commands report to theirs, instead of starting the
    embedded default's temporary server (about 18 s of CPU each time). The tests of that default
    path leave it off: the SQLite kill/resume test's first kill and its resume, the server watchdog,
    the slow-machine test, and every command of the fast tier."""
    env = {k: v for k, v in os.environ.items() if not (drop and k.startswith(drop))} | LOADED_MACHINE
    if shared_prefect:
        env["PREFECT_API_URL"] = shared_prefect_api()
    return env


_SHARED: dict[str, str] = {}
_STOP = ExitStack()
atexit.register(_STOP.close)


def shared_prefect_api() -> str:
    """The API of one real Prefect server for this test process (an xdist worker), started on the
    first call and stopped when the process exits. Its own home, no UI and no background services:
    the commands only report flow and task runs to it, as to the temporary server."""
    if "url" not in _SHARED:
        port = free_port()
        home = Path(tempfile.mkdtemp(prefix="trajforge-test-prefect-"))
        _STOP.callback(shutil.rmtree, home, True)  # after the server stops (last in, first out)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env |= {"PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        prefect = str(Path(sys.executable).with_name("prefect"))
        args = [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
        args += ["--no-services", "--no-ui"]
        url = f"http://127.0.0.1:{port}/api"
        # the server dies with this process, even killed: PR_SET_PDEATHSIG (1) on Linux
        orphan_guard = lambda: ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # noqa: E731
        _STOP.enter_context(server_process(args, env, url, home / "server.log", 600, preexec_fn=orphan_guard))
        _SHARED["url"] = url
    return _SHARED["url"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@contextmanager
def server_process(
    args: list[str], env: dict[str, str], url: str, log_path: Path, timeout_s: float, **popen: object
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `args`, output to `log_path`, until `url`/health answers; terminate it (then kill) after."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, **popen)  # type: ignore[call-overload]
        try:
            deadline = time.monotonic() + timeout_s
            while not healthy(url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{args[0]} did not come up on {url}:\n{tail}")
                time.sleep(0.5)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
