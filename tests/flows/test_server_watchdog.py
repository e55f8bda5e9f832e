"""Prefect's temporary API server dies with `trajforge evolve`: a `kill -9` of the command once left
it running, orphaned, every time (flows/prefect_server.py's watchdog)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.evolve import tiny_config
from tests.support.processes import child_env

pytestmark = pytest.mark.slow
TRAJFORGE = str(Path(sys.executable).with_name("trajforge"))


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        kids += [int(k) for k in (task / "children").read_text().split()]
    return kids


def _server_of(pid: int) -> int | None:
    for kid in _children(pid):
        try:
            cmdline = Path(f"/proc/{kid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"uvicorn" in cmdline and b"prefect.server.api.server:create_app" in cmdline:
            return kid
    return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_killed_evolve_takes_its_temporary_prefect_server_with_it(tmp_path: Path) -> None:
    config = tiny_config(tmp_path / "evolve.yaml", f"sqlite:///{tmp_path / 'home' / 'trajforge.db'}")
    env = child_env("PREFECT_")
    proc = subprocess.Popen(
        [TRAJFORGE, "evolve", "--rounds", "2", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 240
        server = None
        while server is None:
            assert proc.poll() is None and time.monotonic() < deadline, "the temporary server never started"
            server = _server_of(proc.pid)
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)  # the command alone, as a crash or an OOM kill would
        proc.wait()
        deadline = time.monotonic() + 20
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(server), "the temporary Prefect server outlived its evolve"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
