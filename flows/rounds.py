"""The round's Prefect flows: one per stage, and `evolve_round`, which runs them in order.

Composition only: every task calls one step of `evolve.steps` (plain, idempotent
Python), so a retried task, a rerun flow or a flow killed half-way redoes nothing that
is stored. Tasks that touch devices or model endpoints carry tags, so Prefect tag
concurrency limits (`trajforge serve` creates them from the config) cap them. The
rollout and featurisation fan-out runs on the configured task runner: threads, or Dask
(`evolve.runner: dask`, a local cluster of `dask_workers` processes or `dask_address`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from curation.encoder import round_encoder
from evolve import exploration, heldout, steps
from evolve.ownership import loop_lock
from evolve.spine import open_spine
from evolve.stages import ROUND, check_order
from evolve.trainer import train_next
from trajforge.errors import ConfigError, SpecError
from trajforge.progress import track
from trajforge.settings import Settings
from trajforge.stopping import check_stop

DEVICES = "trajforge-devices"  # tag of tasks that lease devices
MODEL_CALLS = "trajforge-model-calls"  # tag of tasks that may call model endpoints


def io_task(name: str, *tags: str) -> Callable[[Callable[..., Any]], Any]:
    """A task around one step: retried on failure (every step is safe to rerun) but for a wrong
    configuration, never cached; its start is a step boundary where a requested stop
    (`trajforge.stopping`) ends the run."""

    def wrap(fn: Callable[..., Any]) -> Any:
        @functools.wraps(fn)
        def at_boundary(*args: Any, **kwargs: Any) -> Any:
            check_stop()
            with track(name):  # a line from the stage's start, under its counted work
                return fn(*args, **kwargs)

        return task(
            name=name,
            tags=list(tags),
            retries=2,
            retry_delay_seconds=2,
            retry_condition_fn=_worth_retrying,
            cache_policy=NO_CACHE,
        )(at_boundary)

    return wrap


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


@io_task("start-round")
def start_round_task(settings: Settings, number: int) -> dict[str, Any]:
    return steps.start_round(settings, number)


@io_task("round-queries")
def round_queries_task(settings: Settings, number: int) -> list[str]:
    return steps.round_queries(settings, number)


@io_task("register-devices")
def register_devices_task(settings: Settings) -> int:
    return steps.register_devices(settings)


@io_task("rollout-shard", DEVICES, MODEL_CALLS)
def rollout_shard_task(settings: Settings, number: int, uids: list[str]) -> dict[str, Any]:
    return steps.rollout_shard(settings, number, uids)


@io_task("guided-demonstrations", DEVICES)
def demonstrate_task(settings: Settings, number: int, uids: list[str]) -> dict[str, Any]:
    return steps.demonstrate(settings, number, uids)


@io_task("exploration", DEVICES)
def explore_task(settings: Settings, number: int, uids: list[str]) -> dict[str, Any]:
    return exploration.explore(settings, number, uids)


@io_task("train-encoder")
def encoder_task(settings: Settings, number: int) -> dict[str, Any]:
    spine = open_spine(settings)
    return round_encoder(spine.sessions, spine.store, spine.frames, settings.curate, number)


@io_task("featurise-shard")
def featurise_shard_task(settings: Settings, number: int, uids: list[str]) -> dict[str, Any]:
    return steps.featurise_shard(settings, number, uids)


@io_task("judge", MODEL_CALLS)
def judge_task(settings: Settings, number: int) -> dict[str, Any]:
    return steps.judge(settings, number)


@io_task("calibrate-and-extract", MODEL_CALLS)
def calibrate_task(settings: Settings, number: int) -> dict[str, Any]:
    return steps.calibrate(settings, number)


@io_task("curate", MODEL_CALLS)
def curate_task(settings: Settings, number: int) -> dict[str, Any]:
    return steps.curate(settings, number)


@io_task("publish")
def publish_task(settings: Settings, number: int) -> dict[str, Any]:
    return steps.publish_round(settings, number)


@io_task("train-next-policy")
def train_task(settings: Settings, number: int, version: int) -> dict[str, Any]:
    return train_next(settings, number, version)


@io_task("promote-policy", DEVICES, MODEL_CALLS)
def promote_task(settings: Settings, number: int) -> dict[str, Any]:
    return heldout.promote(settings, number)


@io_task("finish-round", DEVICES, MODEL_CALLS)
def finish_task(settings: Settings, number: int, extra: dict[str, Any]) -> dict[str, Any]:
    return steps.finish_round(settings, number, extra)


@flow(name="generate_queries")
def generate_queries_flow(settings: Settings, number: int) -> list[str]:
    """Open the round (its policy version) and sample its task queries on every app's DAG."""
    start_round_task(settings, number)
    return round_queries_task(settings, number)


@flow(name="rollout_round")
def rollout_round_flow(settings: Settings, number: int) -> dict[str, Any]:
    """K rollouts per query, fanned out by query shard; round 1 adds guided demonstrations."""
    uids = round_queries_task(settings, number)
    register_devices_task(settings)
    parts = steps.shards(uids, settings.evolve.shards)
    reports = [f.result() for f in rollout_shard_task.map(unmapped(settings), unmapped(number), parts)]
    guided = steps.guided_queries(settings, number, uids)
    demos = demonstrate_task(settings, number, guided) if guided else {}
    unsolved = exploration.unsolved_queries(settings, number, uids)
    explored = explore_task(settings, number, unsolved) if unsolved else {}
    total = {k: sum(r[k] for r in reports) for k in ("episodes", "already_stored", "successes", "steps")}
    return {**total, "guided": demos, "explored": explored}


@flow(name="judge_round")
def judge_round_flow(settings: Settings, number: int) -> dict[str, Any]:
    """Step and trajectory critics on every episode of the round."""
    return judge_task(settings, number)


@flow(name="calibrate")
def calibrate_flow(settings: Settings, number: int) -> dict[str, Any]:
    """Critics against verifier and human anchors, then CSRS sample extraction."""
    return calibrate_task(settings, number)


@flow(name="curate_round")
def curate_round_flow(settings: Settings, number: int) -> dict[str, Any]:
    """Screenshot features fanned out by episode shard, then dedup, guidance, thoughts, recovery."""
    encoder = encoder_task(settings, number)
    episodes = steps.episode_uids(settings, number)
    parts = steps.shards(episodes, settings.evolve.shards)
    for future in featurise_shard_task.map(unmapped(settings), unmapped(number), parts):
        future.result()
    return {**curate_task(settings, number), "encoder": encoder}


@flow(name="publish_dataset")
def publish_dataset_flow(settings: Settings, number: int) -> dict[str, Any]:
    """Seal the dataset version of rounds 1..N; train a candidate on it and choose policy N + 1."""
    published = publish_task(settings, number)
    train_task(settings, number, published["version"])
    promoted = promote_task(settings, number)
    return {**published, "next_policy": promoted["policy"], "promotion": promoted}


@flow(name="evolve_round")
def evolve_round_flow(settings: Settings, number: int) -> dict[str, Any]:
    """Round N with the policy of round N: every stage in order; a finished round is not redone."""
    check_order(ROUND)  # the stages' contracts, before anything runs
    opened = start_round_task(settings, number)
    if opened["done"]:
        return {**opened["stats"], "round": number, "policy": opened["policy"], "skipped": True}
    runner = task_runner(settings)
    generate_queries_flow(settings, number)
    rolled = rollout_round_flow.with_options(task_runner=runner)(settings, number)
    judge_round_flow(settings, number)
    calibrated = calibrate_flow(settings, number)
    curated = curate_round_flow.with_options(task_runner=runner)(settings, number)
    published = publish_dataset_flow(settings, number)
    extra = {
        "policy": opened["policy"],
        "dataset": published["dataset"],
        "dataset_version": published["version"],
        "manifest_sha256": published["manifest_sha256"],
        "next_policy": published["next_policy"],
        "promotion": published["promotion"],
        "consensus": calibrated["consensus"],
        "dedup": curated["dedup"],
        "curriculum": {**curated["curriculum"], "explored": rolled["explored"]},
        "recovery": curated["recovery"],
        "encoder": curated["encoder"],
        "rollout_steps": rolled["steps"],
    }
    return {"round": number, **finish_task(settings, number, extra)}


def target_rounds(settings: Settings, rounds: int | None, more: int | None) -> int:
    """The round the loop runs to: `rounds` absolute, or `more` past the last finished one."""
    if more is not None:
        return steps.finished_rounds(settings) + more
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
        return [evolve_round_flow(settings, n) for n in range(1, target + 1)]
