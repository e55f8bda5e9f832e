"""The Prefect flows under `prefect_test_harness`: a round end to end, rerun, and the Dask runner."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect import flow
from prefect.testing.utilities import prefect_test_harness
from sqlalchemy import select

from evolve.ownership import check_loop_rounds
from evolve.report import collect, write_report
from evolve.spine import open_spine
from evolve.stages import ROUND
from flows import rounds
from storage.datasets import list_versions
from storage.models import Episode, Step
from tests.support.evolve import copy_tiny_run, tiny_config
from trajforge.errors import StorageError
from trajforge.settings import Settings, load_settings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def harness() -> Iterator[None]:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    with prefect_test_harness(server_startup_timeout=120):
        yield


# The two rounds are the slow tier's shared tiny run (`tests.conftest.tiny_run`), made by `trajforge
# evolve` through the same round flow; test_kill_resume compares every table and sealed manifest of it
# with PostgreSQL's. Here the flow reruns its finished round, and the report is written from it.
def test_evolve_rounds_then_rerun_and_report(harness: None, tiny_run: Path, tmp_path: Path) -> None:
    settings = load_settings(copy_tiny_run(tiny_run, tmp_path / "run"))
    made = json.loads((settings.home / "report" / "rounds.json").read_text())["rounds"]
    assert [(r["round"], r["policy"], r["dataset_version"]) for r in made] == [
        (1, "random-explorer@0", 1),
        (2, "knn@1", 2),
    ]
    assert made[0]["promotion"]["promoted"] is True  # knn@1, trained after round 1, rolled round 2 out
    again = rounds.evolve_round_flow(settings, 2)
    assert again["skipped"] is True  # a finished round is not redone, and says what it made
    assert (again["round"], again["policy"], again["dataset_version"]) == (2, "knn@1", 2)
    assert again["next_policy"].startswith("knn@")
    spine = open_spine(settings)
    assert [v.version for v in list_versions(spine.sessions, "trajforge")] == [1, 2]

    figures = collect(spine.sessions)
    assert [f.number for f in figures] == [1, 2] and figures[0].episodes == 8
    assert figures[0].dedup["total"] > 0 and figures[0].categories["action_prediction"] > 0
    assert figures[0].drops  # every filtered item is counted by reason
    index = write_report(spine.sessions, spine.store, tmp_path / "report")
    page = index.read_text()
    for png in ("success_rate", "pass_rate_hist", "critic_accuracy", "dedup_retention",
                "samples_by_category", "drops_by_reason", "tokens"):  # fmt: skip
        assert (tmp_path / "report" / f"{png}.png").read_bytes()[:4] == b"\x89PNG" and f"{png}.png" in page
    assert "knn@1" in page and "Example trajectories (round 2)" in page
    assert (
        "Critics against the anchors, out of sample" in page
        and "learned critic fitted on the other apps" in page
    )
    assert list((tmp_path / "report" / "examples").glob("*.png"))
    table = json.loads((tmp_path / "report" / "rounds.json").read_text())
    assert [r["round"] for r in table["rounds"]] == [1, 2]
    r2 = table["rounds"][1]
    assert r2["policy"] == "knn@1" and r2["dataset_version"] == 2
    assert r2["overall"]["episodes"] == figures[1].episodes == sum(a["episodes"] for a in r2["apps"].values())
    learned = r2["overall"]["accuracy"]["learned_trajectory:3"]  # judged out of sample by query
    assert learned["n"] > 0 and 0 <= learned["accuracy"] <= 1
    assert learned["kappa"] is None or -1 <= learned["kappa"] <= 1  # None: one class only
    assert sum(r2["overall"]["outcome_sources"].values()) > 0 and set(r2["overall"]["outcome_sources"]) <= {
        "verifier",
        "human",
        "critic",
    }
    pooled = page.split("<td>all</td><td>all apps</td>")[1].split("</td>")[
        0
    ]  # every round's held-out verdicts
    judged = sum(
        r["overall"]["accuracy"].get("learned_trajectory:3", {}).get("n", 0) for r in table["rounds"]
    )
    assert f"(n {judged}," in pooled
    assert r2["overall"]["samples"]["kept"] == sum(a["samples"].get("kept", 0) for a in r2["apps"].values())

    check_loop_rounds(settings)  # the store holds what the database expects
    shutil.rmtree(settings.store_path)  # emptied under the home: once `already done`, then a traceback
    with pytest.raises(StorageError, match=r"lost data the database expects \(datasets/trajforge/v00002/"):
        check_loop_rounds(settings)


@flow
def through_curation(settings: Settings) -> None:
    """Round 1's stages up to curation, as the round flow runs them: the rollout and the screenshot
    features fan out on the flow's runner."""
    given: dict = {}
    for stage in ROUND[: [s.name for s in ROUND].index("curate") + 1]:
        given[stage.name] = rounds.run_stage(stage, settings, 1, given)


def _episodes(settings: Settings) -> list[tuple]:
    spine = open_spine(settings)
    with spine.sessions() as s:
        out = []
        for ep in s.scalars(select(Episode).order_by(Episode.uid)):
            actions = s.scalars(select(Step.raw_output).where(Step.episode_id == ep.id).order_by(Step.index))
            out.append((ep.uid, ep.outcome, ep.reason, tuple(actions)))
        return out


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_dask_runner_with_two_workers_matches_the_thread_runner(
    harness: None, tmp_path: Path, db_url: str
) -> None:
    results = {}
    for runner in ("thread", "dask"):
        cfg = tiny_config(
            tmp_path / runner / "evolve.yaml", f"sqlite:///{tmp_path / runner / 'db.sqlite'}", runner=runner
        )
        settings = load_settings(cfg)
        through_curation.with_options(task_runner=rounds.task_runner(settings))(settings)
        results[runner] = _episodes(settings)
    assert len(results["thread"]) == 12
    assert results["dask"] == results["thread"]
