"""The round's stage contracts: the loop's order is sound, and a stage run out of order fails
before it writes anything, naming the command that does what is missing."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from evolve.spine import open_spine
from evolve.stages import ROUND, check_order
from flows.cli import app as cli
from storage.models import Guidance, QueryPassRate, Sample
from storage.rounds import recorded
from tests.support.evolve import roll_out, stage
from trajforge.errors import ConfigError, StageError
from trajforge.settings import Settings
from trajforge.stage import Stage, one_or_none, split, sum_counts


def test_the_loops_stages_come_in_an_order_their_contracts_allow() -> None:
    check_order(ROUND)
    by_name = {one.name: one for one in ROUND}
    swapped = [by_name["start"], by_name["queries"], by_name["judge"], by_name["rollout"]]
    with pytest.raises(ConfigError, match="stage 'judge' runs before rollout, which it needs"):
        check_order(swapped)
    reads_nothing_written = dataclasses.replace(by_name["curate"], after=(), reads=("guidance",))
    with pytest.raises(ConfigError, match="stage 'curate' reads guidance, which no earlier stage writes"):
        check_order([by_name["start"], by_name["queries"], reads_nothing_written])
    assert all(isinstance(one, Stage) and one.label for one in ROUND)


def _rows(settings: Settings) -> list[int]:
    with open_spine(settings).sessions() as s:
        return [s.scalar(select(func.count()).select_from(t)) or 0 for t in (Sample, Guidance, QueryPassRate)]


def test_a_stage_out_of_order_names_the_missing_stage_and_writes_nothing(evolve_settings: Settings) -> None:
    settings = evolve_settings
    stage(settings, "start", 1)
    uids = stage(settings, "queries", 1)
    stage(settings, "devices", 1)
    roll_out(settings, 1, uids[:2])
    for name in ("curate", "calibrate"):
        with pytest.raises(StageError) as caught:
            stage(settings, name, 1)
        assert (
            str(caught.value)
            == "round 1 has not been through stage judge; run `trajforge stage judge --round 1` first"
        )
    assert _rows(settings) == [0, 0, 0]
    stage(settings, "judge", 1)
    with pytest.raises(
        StageError, match="round 1 has not been through stage calibrate; run `trajforge stage calibrate"
    ):
        stage(settings, "publish", 1)
    stage(settings, "curate", 1)  # judged: curation runs
    assert _rows(settings)[2] > 0


def test_a_stage_runs_alone_from_the_cli_and_keeps_its_report(
    evolve_config: Path, evolve_settings: Settings
) -> None:
    """`trajforge stage NAME` runs the stage's own code on the reports the stages before it kept,
    and keeps its own, which a resumed round reuses (`evolve.stages.recorded`)."""
    settings = evolve_settings
    stage(settings, "start", 1)
    runner = CliRunner()
    typo = runner.invoke(cli, ["stage", "judgr", "--config", str(evolve_config)])
    assert isinstance(typo.exception, ConfigError)
    assert "no stage 'judgr'; the stages are start, queries" in str(typo.exception)
    queries = runner.invoke(cli, ["stage", "queries", "--round", "1", "--config", str(evolve_config)])
    assert queries.exit_code == 0, queries.output
    spine = open_spine(settings)
    uids = recorded(spine.sessions, 1)["queries"]
    assert len(uids) == 4 and "round 1: queries\n4 queries" in queries.output
    stage(settings, "devices", 1)
    early = runner.invoke(cli, ["stage", "judge", "--config", str(evolve_config)])
    assert isinstance(early.exception, StageError) and "round 1 has not been through stage rollout" in str(
        early.exception
    )
    rolled = runner.invoke(cli, ["stage", "rollout", "--round", "1", "--config", str(evolve_config)])
    assert rolled.exit_code == 0, rolled.output  # its parts: the queries the `queries` stage kept
    played = recorded(spine.sessions, 1)["rollout"]
    assert played["episodes"] == len(uids) * settings.evolve.rollouts and played["already_stored"] == 0
    judged = runner.invoke(cli, ["critics", "run", "--config", str(evolve_config)])
    assert judged.exit_code == 0 and judged.output.startswith("round 1: judged 8 episodes"), judged.output
    assert "(offline critics)" in judged.output and recorded(spine.sessions, 1)["judge"]["episodes"] == 8
    finish = runner.invoke(cli, ["stage", "finish", "--config", str(evolve_config)])
    assert isinstance(finish.exception, StageError), finish.output
    assert str(finish.exception) == (  # finish runs after publish: the first stage it lacks, named
        "round 1 has not been through stage publish; run `trajforge stage publish --round 1` first"
    )


def test_a_stage_declares_what_it_needs_beside_its_code() -> None:
    assert [one.name for one in ROUND][:4] == ["start", "queries", "devices", "rollout"]
    assert {one.label for one in ROUND} >= {"rollout-shard", "judge", "calibrate-and-extract", "curate"}
    fanned = {one.name for one in ROUND if one.fan_out is not None}
    assert fanned == {"rollout", "guided", "explore", "featurise"}
    assert all(one.merge is not None for one in ROUND if one.fan_out is not None)
    assert [one.name for one in ROUND if not one.resumable] == ["start", "finish"]
    assert split(["a", "b", "c"], 2) == [["a", "c"], ["b"]] and split([], 3) == []
    assert sum_counts([{"n": 1, "s": 0.5, "x": "y"}, {"n": 2, "flag": True}]) == {"n": 3, "s": 0.5}
    assert one_or_none([]) == {} and one_or_none([{"a": 1}]) == {"a": 1}


def test_the_per_stage_commands_are_the_loops_stages(evolve_config: Path, evolve_settings: Settings) -> None:
    """`trajforge critics calibrate` and `trajforge datasets publish` run the loop's calibrate and
    publish stages by the one runner: the same report, and the same config hash (the loop's version
    is reused, not sealed again under other filters)."""
    from storage.models import DatasetVersion

    spine, given = open_spine(evolve_settings), dict[str, Any]()
    for one in ROUND[: [s.name for s in ROUND].index("publish") + 1]:
        given[one.name] = stage(evolve_settings, one.name, 1, **given)
    runner, config = CliRunner(), ["--config", str(evolve_config)]
    calibrated = runner.invoke(cli, ["critics", "calibrate", *config])
    assert calibrated.exit_code == 0, calibrated.output
    assert "critic consensus vs anchors" in calibrated.output and "consensus:5" in calibrated.output
    assert recorded(spine.sessions, 1)["calibrate"]["consensus"] == given["calibrate"]["consensus"]
    published = runner.invoke(cli, ["datasets", "publish", *config])
    assert published.exit_code == 0, published.output
    again = recorded(spine.sessions, 1)["publish"]
    assert again == {**given["publish"], "reused": True}, (again, given["publish"])
    with spine.sessions() as s:
        hashes = s.scalars(select(DatasetVersion.config_hash)).all()
    assert len(hashes) == 1  # one selection, one hash: nothing sealed twice
