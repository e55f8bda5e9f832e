"""Prefect's temporary API server, with its output in a log file instead of the terminal.

Prefect starts the server as a child process that writes to our stdout and stderr, so a server
that fails to start prints uvicorn's traceback over the one-line error the CLI gives. Prefect
keeps one server per port and asks for the one with no port; registering ours under that key
first makes Prefect start this one.

The server must not outlive the command that started it: a `kill -9` of `trajforge evolve` once
left it running, orphaned. A small watchdog process, started beside it, stops the server when its
parent dies (the watchdog is reparented) and exits on its own when the server stops.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from prefect.server.api.server import SubprocessASGIServer

# argv: the parent's pid and the server's; polls twice a second
_WATCHDOG = """
import os, signal, sys, time
parent, server = int(sys.argv[1]), int(sys.argv[2])
while True:
    time.sleep(0.5)
    try:
        os.kill(server, 0)
    except ProcessLookupError:
        break  # the server stopped: nothing left to watch
    if os.getppid() != parent:  # the parent died and this process was reparented
        os.kill(server, signal.SIGTERM)
        for _ in range(50):
            time.sleep(0.1)
            try:
                os.kill(server, 0)
            except ProcessLookupError:
                sys.exit(0)
        os.kill(server, signal.SIGKILL)
        break
"""


class _LoggedServer(SubprocessASGIServer):
    log: Path

    def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
        server = self._start_logged()
        self.watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(server.pid)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return server

    def _start_logged(self) -> subprocess.Popen[Any]:
        # the child inherits file descriptors 1 and 2: point them at the log while it starts
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        sink = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.dup2(sink, 1)
            os.dup2(sink, 2)
            return super()._run_uvicorn_command()
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in (sink, *saved):
                os.close(fd)


def quiet_temporary_server(log: Path) -> None:
    """Make the temporary server Prefect starts (if it starts one) write to `log`."""
    current = SubprocessASGIServer._instances.get(None)
    if current is not None and current.running:
        return  # already started, by an earlier call in this process
    server = _LoggedServer()  # registers under port None
    server.log = log


def server_log() -> Path | None:
    """The temporary server's log file, when it has one."""
    server = SubprocessASGIServer._instances.get(None)
    return server.log if isinstance(server, _LoggedServer) else None
