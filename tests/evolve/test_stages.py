"""The round's stage contracts: the loop's order is sound, and a stage run out of order fails
before it writes anything, naming the command that does what is missing."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import func, select

from evolve import steps
from evolve.spine import open_spine
from evolve.stages import ROUND, Stage, check_order
from storage.models import Guidance, QueryPassRate, Sample
from trajforge.errors import ConfigError, StageError
from trajforge.settings import Settings


def test_the_loops_stages_come_in_an_order_their_contracts_allow() -> None:
    check_order(ROUND)
    by_name = {stage.name: stage for stage in ROUND}
    swapped = [by_name["queries"], by_name["judge"], by_name["rollout"]]
    with pytest.raises(ConfigError, match="stage 'judge' runs before rollout, which it needs"):
        check_order(swapped)
    reads_nothing_written = dataclasses.replace(by_name["curate"], after=(), reads=("guidance",))
    with pytest.raises(ConfigError, match="stage 'curate' reads guidance, which no earlier stage writes"):
        check_order([by_name["queries"], reads_nothing_written])
    assert all(isinstance(stage, Stage) and stage.command for stage in ROUND)


def _rows(settings: Settings) -> list[int]:
    with open_spine(settings).sessions() as s:
        return [s.scalar(select(func.count()).select_from(t)) or 0 for t in (Sample, Guidance, QueryPassRate)]


def test_a_stage_out_of_order_names_the_missing_stage_and_writes_nothing(evolve_settings: Settings) -> None:
    settings = evolve_settings
    steps.start_round(settings, 1)
    uids = steps.round_queries(settings, 1)
    steps.register_devices(settings)
    steps.rollout_shard(settings, 1, uids[:2])
    for run in (steps.curate, steps.calibrate):
        with pytest.raises(StageError) as caught:
            run(settings, 1)
        assert str(caught.value) == "round 1 is not judged yet; run `trajforge critics run --round 1` first"
    assert _rows(settings) == [0, 0, 0]
    steps.judge(settings, 1)
    with pytest.raises(StageError, match="round 1 is not calibrated yet; run `trajforge critics calibrate"):
        steps.publish_round(settings, 1)
    steps.curate(settings, 1)  # judged: curation runs
    assert _rows(settings)[2] > 0
