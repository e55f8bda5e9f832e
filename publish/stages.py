"""Publishing's stage of a round: seal the dataset version of rounds 1..N (once: a version sealed
with the same config is reused)."""

from __future__ import annotations

from typing import TypedDict

from sqlalchemy import select

from publish.versions import PublishConfig, publish
from storage.context import RoundContext
from storage.datasets import manifest
from storage.models import Dataset, DatasetVersion
from trajforge.settings import Settings
from trajforge.stage import Facts, Given, Stage


class Published(TypedDict):
    """The publish stage's report, as `train` and `finish` read it."""

    dataset: str
    version: int
    manifest_sha256: str
    rows: int
    reused: bool  # a version sealed earlier with the same config


def publish_config(
    settings: Settings, rounds: tuple[int, ...] | None, val_fraction: float = 0.1
) -> PublishConfig:
    """The rounds asked for (None: every round) with the run's filters, as the loop's stage and
    `trajforge datasets publish` both seal them: one selection, one config hash. Filtering off
    publishes dropped and held samples too."""
    filters = {
        "curate": settings.curate.model_dump(mode="json"),
        "critics": settings.critics.model_dump(mode="json"),
        "filtering": settings.evolve.filtering,
    }
    statuses = ("kept",) if settings.evolve.filtering else ("kept", "dropped", "held")
    return PublishConfig(rounds=rounds, val_fraction=val_fraction, filters=filters, statuses=statuses)


def publish_round(ctx: RoundContext, number: int, _given: Given) -> Facts:
    """Seal the dataset version of this round (once: a version with the same config is reused)."""
    name, config = ctx.settings.evolve.dataset, publish_config(ctx.settings, tuple(range(1, number + 1)))
    with ctx.sessions() as s:
        sealed = s.execute(
            select(DatasetVersion.version, DatasetVersion.manifest_sha256)
            .join(Dataset, Dataset.id == DatasetVersion.dataset_id)
            .where(
                Dataset.name == name,
                DatasetVersion.status == "sealed",
                DatasetVersion.config_hash == config.config_hash,
            )
        ).first()
    if sealed is not None:
        version, digest = sealed
        rows = manifest(ctx.sessions, ctx.store, name, version).rows
        out = Published(dataset=name, version=version, manifest_sha256=digest, rows=rows, reused=True)
    else:
        report = publish(ctx.sessions, ctx.store, name, config, description=f"evolve round {number}")
        out = Published(
            dataset=name,
            version=report.version,
            manifest_sha256=report.manifest_sha256,
            rows=report.rows,
            reused=False,
        )
    line = f"dataset {name} v{out['version']}: {out['rows']} rows" + (" (reused)" if out["reused"] else "")
    return Facts(out, line)


PUBLISH: Stage[RoundContext] = Stage(
    "publish",
    "publish",
    publish_round,
    reads=("sample",),
    writes=("dataset_version", "shard"),
    after=("calibrate", "curate"),
)
