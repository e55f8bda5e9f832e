"""The process boundary to BrowserGym's venv: `serve.py` under that venv's Python, one JSON line
per request and per reply.

A reply that does not come in time is a hung device, a server that died a crashed one (both
retried on a fresh server by the runner); a reply of kind `config` is the request's own mistake.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from rollout.web.browser import CHROMIUM, chromium_env
from rollout.web.files import file_uri
from trajforge.errors import ConfigError, DeviceCrashed, DeviceHung

SERVE = Path(__file__).with_name("serve.py")
REPLY_S = 120.0  # a reset launches Chromium: seconds on a loaded 2-core machine


class Pipe:
    """One `serve.py` process: BrowserGym's environment for one device slot."""

    def __init__(self, python: Path) -> None:
        env = {**chromium_env(), "TRAJFORGE_CHROMIUM": CHROMIUM}
        if "MINIWOB_URL" not in env:
            from rollout.suites.miniwob import miniwob_html

            # no MiniWoB pages here: BrowserGym's MiniWoB tasks say so themselves
            with contextlib.suppress(ConfigError):
                env["MINIWOB_URL"] = file_uri(miniwob_html()) + "/"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (the server's stderr, closed by close())
        self._proc = subprocess.Popen(
            [str(python), str(SERVE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env={str(k): str(v) for k, v in env.items()},
            start_new_session=True,
        )
        self._buffer = b""

    def ask(self, request: dict[str, Any], timeout: float = REPLY_S) -> dict[str, Any]:
        """The server's reply to `request`.

        Raises:
            ConfigError: the request was wrong (an unknown task).
            DeviceCrashed: the server or its browser failed.
            DeviceHung: no reply within `timeout` seconds (the server is killed).
        """
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
        except BrokenPipeError as exc:
            raise DeviceCrashed(f"BrowserGym's server exited ({proc.poll()}): {self._said()}") from exc
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, left))
            if not ready:
                self.close()
                raise DeviceHung(f"BrowserGym's server gave no reply to {request['op']} within {timeout:g} s")
            chunk = os.read(proc.stdout.fileno(), 1 << 20)
            if not chunk:
                raise DeviceCrashed(f"BrowserGym's server exited ({proc.wait()}): {self._said()}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        if reply.get("ok"):
            return reply
        if reply.get("kind") == "config":
            raise ConfigError(f"BrowserGym: {reply['error']}")
        raise DeviceCrashed(f"BrowserGym: {reply['error']}")

    def _said(self) -> str:
        self._log.seek(0)
        lines = self._log.read().decode("utf-8", errors="replace").strip().splitlines()
        return " | ".join(lines[-3:]) or "nothing on stderr"

    def close(self) -> None:
        """End the server, then whatever of its group is left (its browser)."""
        proc = self._proc
        if self._log.closed:
            return
        if proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.write(b'{"op": "close"}\n')
                proc.stdin.flush()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()
        self._log.close()
