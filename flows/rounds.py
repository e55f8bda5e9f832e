"""The round as one Prefect flow, `evolve_round`: every stage of `evolve.stages.ROUND` in order,
each run by one generic task (`stage_task`), and `evolve`, the deployment entry point.

A task runs one stage (`trajforge.stage.Stage`) on the round's context: the stage's own code,
idempotent, so a retried task, a rerun flow or a flow killed half-way redoes nothing that is
stored; a stage that finished keeps its report in the round, and a resumed round reuses it. Tasks
take the stage's tags, so Prefect tag concurrency limits (`trajforge serve` creates them from the
config) cap the ones that touch devices or model endpoints. A fanned-out stage (rollout by query
shard, screenshot features by episode shard) maps its parts on the configured task runner:
threads, or Dask (`evolve.runner: dask`, a local cluster of `dask_workers` processes or
`dask_address`).
"""

from __future__ import annotations

from typing import Any

from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from evolve import steps
from evolve.ownership import loop_lock
from evolve.spine import Spine, open_spine
from evolve.stages import ROUND, Parts, check_order, stage_named
from evolve.stages import run_stage as run_in_round
from trajforge.errors import ConfigError, SpecError
from trajforge.progress import track
from trajforge.settings import Settings
from trajforge.stage import DEVICES, MODEL_CALLS, Given, Stage
from trajforge.stopping import check_stop

__all__ = [
    "DEVICES",
    "MODEL_CALLS",
    "evolve_flow",
    "evolve_round_flow",
    "round_flow",
    "run_stage",
]


@task(retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def stage_task(name: str, settings: Settings, number: int, given: dict[str, Any]) -> Any:
    """One stage (or one part of a fanned-out stage) on the round: retried on failure (every stage
    is safe to rerun) but for a wrong configuration, never cached; its start is a step boundary
    where a requested stop (`trajforge.stopping`) ends the run."""
    check_stop()
    stage = stage_named(name)
    with track(stage.label):  # a line from the stage's start, under its counted work
        return stage.run(open_spine(settings), number, given).as_json()


def _worth_retrying(_task: Any, _run: Any, state: Any) -> bool:
    """Not a wrong configuration or app spec (a suite hook that throws): a retry fails the same way."""
    return not isinstance(getattr(state, "data", None), ConfigError | SpecError)


def task_runner(settings: Settings) -> TaskRunner[Any]:
    """The fan-out runner the settings ask for."""
    ev = settings.evolve
    if ev.runner == "dask":
        from prefect_dask import DaskTaskRunner

        if ev.dask_address:
            return DaskTaskRunner(address=ev.dask_address)
        return DaskTaskRunner(
            cluster_kwargs={"n_workers": ev.dask_workers, "threads_per_worker": 1, "processes": True}
        )
    return ThreadPoolTaskRunner(max_workers=max(ev.shards, 1))


def prefect_parts(settings: Settings) -> Parts:
    """A stage's parts as Prefect tasks of the one generic kind: one task, or one per part mapped on
    the flow's runner; each takes the stage's tags (the concurrency limits on devices and models)."""

    def run(stage: Stage[Spine], number: int, parts: list[Given]) -> list[Any]:
        one = stage_task.with_options(
            name=stage.label, tags=list(stage.tags), retry_condition_fn=_worth_retrying
        )
        if stage.fan_out is None:
            return [one(stage.name, settings, number, dict(parts[0]))]
        futures = one.map(unmapped(stage.name), unmapped(settings), unmapped(number), parts)
        return [f.result() for f in futures]

    return run


def run_stage(stage: Stage[Spine], settings: Settings, number: int, given: Given) -> Any:
    """The stage on the round, run by the one runner (`evolve.stages.run_stage`) with its parts as
    Prefect tasks."""
    return run_in_round(open_spine(settings), stage, number, given, prefect_parts(settings))


@flow(name="evolve_round")
def evolve_round_flow(settings: Settings, number: int) -> dict[str, Any]:
    """Round N with the policy of round N: every stage in order; a finished round is not redone."""
    check_order(ROUND)  # the stages' contracts, before anything runs
    start, *middle, finish = ROUND
    opened = run_stage(start, settings, number, {})
    if opened["done"]:
        return {**opened["stats"], "round": number, "policy": opened["policy"], "skipped": True}
    given: dict[str, Any] = {start.name: opened}
    for stage in middle:
        given[stage.name] = run_stage(stage, settings, number, given)
    return {"round": number, **run_stage(finish, settings, number, given)}


def round_flow(settings: Settings) -> Any:
    """`evolve_round_flow` on the task runner the settings ask for."""
    return evolve_round_flow.with_options(task_runner=task_runner(settings))


def target_rounds(settings: Settings, rounds: int | None, more: int | None) -> int:
    """The round the loop runs to: `rounds` absolute, or `more` past the last finished one."""
    if more is not None:
        return steps.finished_rounds(open_spine(settings)) + more
    return rounds if rounds is not None else settings.evolve.rounds


@flow(name="evolve")
def evolve_flow(
    config: str | None = None, rounds: int | None = None, more: int | None = None
) -> list[dict[str, Any]]:
    """The deployment entry point: settings from `config` and the worker's environment, then rounds.

    Scheduled deployments pass `more=1`: each run adds one round to the loop. A run that was
    killed mid-round left that round unfinished, so the next scheduled run resumes it (only done
    rounds count), redoing nothing stored.
    """
    from pathlib import Path

    from trajforge.settings import load_settings

    settings = load_settings(Path(config) if config else None)
    # One run of the loop at a time: an overlapping scheduled run fails at once, naming the holder.
    with loop_lock(settings, "prefect evolve run"):
        target = target_rounds(settings, rounds, more)
        return [round_flow(settings)(settings, n) for n in range(1, target + 1)]
