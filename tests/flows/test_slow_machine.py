"""A loaded machine and racing runs: Prefect's temporary API gets a generous, configurable start
timeout and a failure to start is one line; racing trainers never share a build folder and a
killed one's leftovers are cleaned with a warning."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest

from publish.train import _complete
from tests.flows.test_bad_input import one_line_error
from tests.flows.test_cli import TRAJFORGE
from trajforge.settings import load_settings


def test_the_start_timeout_is_a_setting_with_a_generous_default() -> None:
    assert load_settings().evolve.prefect_start_timeout_s == 120  # Prefect's own 20s is too short here


@pytest.mark.slow  # over 40 s of CPU on 2 cores: the fast tier stays under 15 min
def test_a_prefect_api_that_does_not_start_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAJFORGE_", "PREFECT_"))}
    # long enough for the server to fail and print its traceback before the wait ends: 20 s was not,
    # on 2 cores under the slow tier's four workers (the server was still importing, its log empty)
    env["TRAJFORGE_EVOLVE_PREFECT_START_TIMEOUT_S"] = "60"
    # the temporary server cannot open its database, so it never answers
    env["PREFECT_API_DATABASE_CONNECTION_URL"] = "sqlite+aiosqlite:////nonexistent/folder/prefect.db"
    done = subprocess.run(
        [TRAJFORGE, "evolve", "--rounds", "1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=180,
    )
    log = tmp_path / ".trajforge" / "prefect" / "server.log"
    one_line_error(
        done,
        "Prefect's temporary API server did not start within 60s",
        f"(its log: {log})",
        "TRAJFORGE_EVOLVE_PREFECT_START_TIMEOUT_S",
        "PREFECT_API_URL",
    )
    assert "unable to open database file" in log.read_text()  # the server's traceback went there


def test_a_killed_runs_partial_build_is_removed_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    final = tmp_path / "knn-checkpoint"
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs
    stale = tmp_path / f"knn-checkpoint.partial-{dead.pid}"
    stale.mkdir()
    (stale / "half.bin").write_bytes(b"\0" * 10)
    live = tmp_path / f"knn-checkpoint.partial-{os.getppid()}"  # a run still going: left alone
    live.mkdir()

    def build(folder: Path) -> None:
        folder.mkdir()
        (folder / "model.json").write_text("{}")

    with caplog.at_level(logging.WARNING, logger="trajforge.trainer"):
        assert _complete(final, build) == final
    assert (final / "model.json").is_file() and not stale.exists() and live.exists()
    assert f"left by a run (pid {dead.pid}) that ended before finishing it" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["knn-checkpoint", live.name]


def test_racing_builds_use_their_own_folders_and_the_first_to_finish_wins(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    final = tmp_path / "export"

    def build(folder: Path) -> None:
        folder.mkdir()
        (folder / "ours.txt").write_text("ours")
        # meanwhile another run finishes the same folder
        theirs = tmp_path / "export.partial-other"
        theirs.mkdir()
        (theirs / "theirs.txt").write_text("theirs")
        theirs.rename(final)

    with caplog.at_level(logging.WARNING, logger="trajforge.trainer"):
        _complete(final, build)
    assert [p.name for p in final.iterdir()] == ["theirs.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["export"]  # no orphan partial
    assert "completed by another run meanwhile" in caplog.text
