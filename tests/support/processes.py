"""A server the tests start as a subprocess: up when its /health answers 200, stopped after."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Prefect's temporary API server on CI's two cores under the slow tier's four workers: trajforge's
# default wait of 120 s was once not enough (the MiniWoB++ suite loop at stop 81). Every command a
# test starts waits longer; a server that really cannot start is tested in test_slow_machine.py.
LOADED_MACHINE = {"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "600"}


def child_env(*drop: str) -> dict[str, str]:
    """The environment for a command a test starts: this process's, less the variables whose names
    start with one of `drop` (a user's TRAJFORGE_ settings, a PREFECT_API_URL), with the loaded
    machine's Prefect start timeout."""
    return {k: v for k, v in os.environ.items() if not (drop and k.startswith(drop))} | LOADED_MACHINE


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
