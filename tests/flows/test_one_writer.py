"""One writer per home: every command that writes rounds, labels, samples or versions takes the
home's lock that `evolve` holds, and refuses in one line naming the holder while another has it.
A single-stage command once took an `evolve`'s round 2 on the same home and left the home unusable."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from evolve.ownership import loop_lock
from evolve.spine import open_spine
from flows.cli import app
from storage.models import Query, Round
from tests.flows.test_cli import cli
from tests.support.smoke import smoke_round
from trajforge.errors import LoopBusy
from trajforge.settings import load_settings

WRITERS = [
    ["rollout", "--app", "settings", "--queries", "1"],
    ["run", "--queries", "1", "--rollouts", "1"],
    ["stage", "judge"],
    ["critics", "run"],
    ["critics", "calibrate"],
    ["critics", "extract"],
    ["curate"],
    ["curate", "train-encoder"],
    ["datasets", "publish"],
    ["annotate", "push"],
    ["annotate", "pull"],
    ["queries", "generate", "--app", "settings", "--n", "1"],
    ["rounds", "drop", "1", "--yes"],
]


def _counts(settings: object) -> tuple[int, int]:
    with open_spine(settings).sessions() as s:  # type: ignore[arg-type]
        return s.scalar(select(func.count(Round.id))) or 0, s.scalar(select(func.count(Query.id))) or 0


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with one finished smoke round: every command has a round to write to."""
    folder = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        smoke_round(load_settings(), queries_per_app=1, rollouts=1)
    return folder


@pytest.mark.parametrize("args", WRITERS, ids=[" ".join(a[:2]) for a in WRITERS])
def test_a_writing_command_refuses_while_evolve_holds_the_home(
    home: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.chdir(home)
    settings = load_settings()
    before = _counts(settings)
    with loop_lock(settings, "trajforge evolve"):
        result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, LoopBusy), (result.exception, result.output)
    assert "is held by trajforge evolve (pid" in str(result.exception)
    assert _counts(settings) == before  # refused before anything was written


def test_the_refusal_is_one_line_naming_the_holder_and_the_lock_is_free_after(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(home)
    settings = load_settings()
    with loop_lock(settings, "trajforge evolve"):
        refused = cli("rollout", "--app", "settings", "--queries", "1", cwd=home)
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith(
        "error: the evolve loop of this home"
    )
    assert "held by trajforge evolve (pid" in refused.stderr
    done = CliRunner().invoke(app, ["datasets", "publish"])  # released when the command ended
    assert done.exit_code == 0, done.output
    again = CliRunner().invoke(app, ["datasets", "publish"])
    assert again.exit_code == 0, again.output
