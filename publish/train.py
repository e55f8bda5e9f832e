"""The trainer hook, publish's `train` stage: dataset version N in, policy version N + 1 registered.

The round's sealed version is exported (`trainer.format`) under the home, the trainer
command runs with `{dataset}` and `{output}` filled in, and the checkpoint it leaves is
registered as the next policy, with the endpoint it will be served from. The default
command is the built-in knn trainer (`python -m rollout.policies.knn`) on the `rl-verl`
export; its checkpoint is copied into the object store.

Each part is resumable: the export and the checkpoint are written to `*.partial-PID` and
renamed when complete, and registration is idempotent, so a killed training reruns
from the last finished part.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import select

from publish.exports import export, images_trainer
from publish.stages import Published
from storage.context import RoundContext
from storage.db import transaction
from storage.models import Policy as PolicyRow
from storage.models import Round
from storage.policies import KNN, register_policy, upload_checkpoint
from trajforge.errors import ConfigError, TrajforgeError
from trajforge.families import get_family
from trajforge.procs import sweep_partials
from trajforge.settings import Settings
from trajforge.stage import Facts, Given, Stage

log = logging.getLogger("trajforge.trainer")


class TrainerError(TrajforgeError):
    """The trainer command failed or left no checkpoint."""


def _complete(final: Path, build: Callable[[Path], None]) -> Path:
    """Build into `final.partial-PID` and rename, unless `final` is already complete.

    Each process builds in a folder of its own, so two racing runs never write into one;
    the first to finish wins and the other discards its copy. A folder left by a run that was
    killed is removed, with a warning.
    """
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    sweep_partials(final)  # and the export folders inside them
    partial = final.with_name(f"{final.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        build(partial)
        try:
            partial.rename(final)
        except OSError:
            if not final.exists():
                raise
            log.warning("%s was completed by another run meanwhile; discarding this run's copy", final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return final


def command_line(settings: Settings, dataset: Path, output: Path, version: int, number: int) -> list[str]:
    fill = {"dataset": str(dataset), "output": str(output), "version": str(version), "round": str(number)}
    if settings.trainer.command is None:
        return [sys.executable, "-m", "rollout.policies.knn", "--data", str(dataset), "--out", str(output)]
    try:
        return [part.format(**fill) for part in shlex.split(settings.trainer.command)]
    except (KeyError, ValueError) as exc:
        raise ConfigError(
            f"trainer.command {settings.trainer.command!r}: {exc}; use only {{dataset}}, {{output}}, "
            "{version} and {round}"
        ) from exc


def _write_export(ctx: RoundContext, dataset_version: int, fmt: str, builtin: bool, folder: Path) -> None:
    # The built-in policy reads the screenshots as stored (it acts on them at that size); an
    # external trainer gets images sized for the trainer its format is for.
    settings = ctx.settings
    family = None if builtin else settings.trainer.family  # a family's export answers in its own format
    export(
        ctx.sessions, ctx.store, settings.evolve.dataset, dataset_version, fmt, str(folder),
        "canonical" if family else settings.trainer.action_format, tolerance=settings.curate.point_tolerance,
        settings=settings, trainer="none" if builtin else settings.trainer.images, family=family,
        misfit_as="canonical" if builtin else None,  # it learns the canonical actions: any device's
    )  # fmt: skip


def _run_trainer(settings: Settings, data: Path, version: int, number: int, folder: Path) -> None:
    """The user's trainer command on the export `data` of dataset `version`; its checkpoint goes to
    `folder`."""
    trainer = settings.trainer
    folder.mkdir(parents=True)
    argv = command_line(settings, data, folder, version, number)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=trainer.timeout_s, check=False)
    except FileNotFoundError as exc:
        raise TrainerError(
            f"trainer command {argv[0]!r} not found; install it or fix trainer.command"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise TrainerError(f"trainer command ran past trainer.timeout_s = {trainer.timeout_s}s") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise TrainerError(f"trainer command exited {done.returncode}: " + " | ".join(tail))
    if not any(folder.iterdir()):
        raise TrainerError(f"trainer command left no checkpoint in {{output}} ({folder})")


def train(ctx: RoundContext, number: int, given: Given) -> Facts:
    """The candidate policy of round `number + 1`, trained on the version `publish` sealed."""
    published: Published = given["publish"]
    trained = train_next(ctx, number, published["version"])
    return Facts(trained, f"candidate policy {trained['policy']}")


def train_next(ctx: RoundContext, number: int, dataset_version: int) -> dict[str, Any]:
    """Train on `dataset_version` and register the result as the candidate policy of round
    `number + 1` (`evolve.heldout.promote` decides whether it rolls that round out)."""
    settings = ctx.settings
    trainer = settings.trainer
    builtin = trainer.command is None
    name = KNN if builtin else trainer.name
    with ctx.sessions() as s:
        rnd = s.scalars(select(Round).where(Round.number == number)).one()
        trained = (rnd.stats or {}).get("candidate_policy_id") or (rnd.stats or {}).get("next_policy_id")
        if trained:
            done = s.get(PolicyRow, trained)
            assert done is not None
            return {"policy": f"{done.name}@{done.version}", "policy_id": done.id, "resumed": True}
        parent_id = rnd.policy_id
    fmt = "rl-verl" if builtin else trainer.format
    root = settings.home / "training" / settings.evolve.dataset / f"v{dataset_version}"

    shaped = f"{fmt}-{trainer.family}" if trainer.family and not builtin else fmt  # one export per shape
    data = _complete(root / shaped, partial(_write_export, ctx, dataset_version, fmt, builtin))
    if builtin and not any(data.glob("train*.parquet")):
        return _nothing_to_train(ctx, number, parent_id)
    if not builtin and trainer.family and images_trainer(fmt, trainer.images) == "llamafactory":
        log.warning(
            "trainer.family %s is served screenshots as stored, but the export is sized for "
            "LLaMA-Factory's default image_max_pixels (768*768): the checkpoint learns smaller images and "
            "coordinates than it will be served. Set image_max_pixels: 12845056 in the trainer's YAML "
            "and trainer.images: none",
            trainer.family,
        )
    output = _complete(
        root / f"{name}-checkpoint", partial(_run_trainer, settings, data, dataset_version, number)
    )
    fill = {"output": str(output), "version": str(number)}
    meta: dict[str, Any] = {}
    if builtin:
        uri, endpoint = upload_checkpoint(ctx, output, name, number), None
    else:
        uri = str(output)
        endpoint = (trainer.endpoint or "").format(**fill)
        answers = get_family(trainer.family).action_format if trainer.family else trainer.action_format
        meta = {"model": trainer.model.format(**fill), "format": answers, "family": trainer.family}
    meta |= {
        "dataset": settings.evolve.dataset,
        "dataset_version": dataset_version,
        "trained_after_round": number,
    }
    with transaction(ctx.sessions) as s:
        policy_id = register_policy(s, name, number, meta, endpoint, uri, parent_id)
        rnd = s.scalars(select(Round).where(Round.number == number)).one()
        rnd.keep({"candidate_policy_id": policy_id})
    return {"policy": f"{name}@{number}", "policy_id": policy_id, "checkpoint": uri, "endpoint": endpoint}


NO_TRAINING_ROWS = "no_training_rows"


def _nothing_to_train(ctx: RoundContext, number: int, current_id: int) -> dict[str, Any]:
    """The version holds no action row to learn from (a round in which no episode succeeded, say):
    no candidate is trained, and round `number + 1` keeps this round's policy, with the reason."""
    decision = {"promoted": False, "reason": NO_TRAINING_ROWS}
    with transaction(ctx.sessions) as s:
        rnd = s.scalars(select(Round).where(Round.number == number)).one()
        rnd.keep({"next_policy_id": current_id, "promotion": decision})
        kept = s.get(PolicyRow, current_id)
        assert kept is not None
    return {"policy": f"{kept.name}@{kept.version}", "policy_id": current_id, "skipped": NO_TRAINING_ROWS}


TRAIN: Stage[RoundContext] = Stage(
    "train",
    "train-next-policy",
    train,
    reads=("dataset_version", "shard"),
    writes=("policy", "round"),
    after=("publish",),
    needs=("publish",),
)
