"""Logging is configured once for every command, so no command logs a secret, whoever logs it."""

from __future__ import annotations

import logging
import subprocess

import pytest
from typer.testing import CliRunner

from flows.cli import app
from tests.flows.test_cli import TRAJFORGE
from tests.support.processes import child_env

SECRET = "Authorization: Bearer sk-live-0123456789 via postgresql+psycopg://trainer:hunter2@db:5432/x"


@pytest.mark.parametrize("command", [["config"], ["apps", "list"], ["datasets", "list"]])
def test_every_command_redacts_every_logger(command: list[str], caplog: pytest.LogCaptureFixture) -> None:
    assert CliRunner().invoke(app, command).exit_code == 0
    with caplog.at_level(logging.WARNING):
        for name in ("openai._base_client", "prefect.flow_runs", "httpx", "trajforge.gateway"):
            logging.getLogger(name).warning("request failed: %s", SECRET)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 4 and all("hunter2" not in m and "sk-live" not in m for m in messages)
    assert all("Bearer ***" in m or "Authorization: ***" in m for m in messages)
    assert all("trainer:***@db" in m for m in messages)


def test_a_command_that_logs_prints_no_secret(tmp_path) -> None:
    """`trajforge check` against a server that refuses: the password never reaches the terminal."""
    env = child_env("TRAJFORGE_")
    env["TRAJFORGE_DB_URL"] = "postgresql+psycopg://trainer:hunter2@127.0.0.1:1/x"
    env["TRAJFORGE_DB_ECHO"] = "true"  # SQLAlchemy's own engine logging too
    done = subprocess.run(
        [TRAJFORGE, "check"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    assert done.returncode == 1 and "hunter2" not in done.stdout + done.stderr
    assert "trainer:***@127.0.0.1:1/x" in done.stderr
