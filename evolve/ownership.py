"""Which stored rounds are the loop's own: `trajforge rollout` and `trajforge run` make rounds
too, and `evolve` must not take one of them as a finished round of its own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session, sessionmaker

from evolve.spine import open_spine
from storage.keys import BLOBS, blob_key
from storage.locks import LOOP_LOCK, exclusive
from storage.models import DatasetVersion, Round, Step
from storage.objectstore import ObjectStore
from trajforge.errors import ConfigError, StorageError
from trajforge.settings import Settings


def check_loop_rounds(settings: Settings) -> None:
    """Before the loop runs: every stored round is one of the loop's, and the object store still holds
    what the database says it wrote (`check_store`).

    Raises:
        ConfigError: names the first round another command made.
        StorageError: the store lost data the database expects (emptied, or another bucket).
    """
    spine = open_spine(settings)
    with spine.sessions() as s:
        for row in s.scalars(select(Round).order_by(Round.number)):
            if not loop_round(row):
                raise foreign_round(row)
    check_store(spine.sessions, spine.store)


def lost_objects(sessions: sessionmaker[Session], store: ObjectStore) -> list[str]:
    """What the database names and the store no longer holds: the latest sealed manifest of each
    dataset, and every screenshot a step names (before and after it), found by listing the
    store's screenshots once rather than asking for each."""
    with sessions() as s:
        manifests = [key for key in s.scalars(_latest_manifests()) if key]
        shas = set(s.scalars(select(Step.screenshot).distinct()))
        shas |= {sha for sha in s.scalars(select(Step.screenshot_after).distinct()) if sha}
    lost = [key for key in manifests if not store.exists(key)]
    if shas:
        stored = set(store.list(f"{BLOBS}sha256/"))
        lost += sorted(key for key in map(blob_key, shas) if key not in stored)
    return lost


def check_store(sessions: sessionmaker[Session], store: ObjectStore) -> None:
    """Raises StorageError naming what the store lost (`lost_objects`), with the fixes."""
    lost = lost_objects(sessions, store)
    if lost:
        raise StorageError(
            f"the object store has lost data the database expects ({', '.join(lost[:2])}"
            f"{f' and {len(lost) - 2} more' if len(lost) > 2 else ''} missing): it was emptied, or "
            "the store settings name another bucket or folder; restore it, or point TRAJFORGE_S3_* / "
            "store.path back at the right one, or start a new home (a fresh TRAJFORGE_HOME and database)"
        )


def _latest_manifests() -> Select[tuple[str | None]]:
    """The manifest key of each dataset's latest sealed version."""
    latest = (
        select(DatasetVersion.dataset_id, func.max(DatasetVersion.version).label("v"))
        .where(DatasetVersion.status == "sealed")
        .group_by(DatasetVersion.dataset_id)
        .subquery()
    )
    return select(DatasetVersion.manifest_key).join(
        latest, (DatasetVersion.dataset_id == latest.c.dataset_id) & (DatasetVersion.version == latest.c.v)
    )


def foreign_round(row: Round) -> ConfigError:
    made_by = (row.stats or {}).get("made_by", "another command (trajforge run or rollout)")
    return ConfigError(
        f"round {row.number} was made by {made_by}, not by the loop, so evolve cannot take it as its own; "
        f"roll it back with `trajforge rounds drop {row.number} --yes` (it and any later round), "
        "or evolve in a fresh TRAJFORGE_HOME"
    )


def loop_round(row: Round) -> bool:
    """Whether a stored round is one of the loop's: `trajforge rollout` marks its own rounds, and
    a finished round of the loop has chosen its next policy."""
    stats = row.stats or {}
    if "made_by" in stats:
        return False
    return row.status != "done" or "next_policy_id" in stats


@contextmanager
def loop_lock(settings: Settings, what: str) -> Iterator[None]:
    """Hold the home's loop for the block: one `evolve` (CLI or scheduled run) at a time, whatever
    dataset it publishes.

    Raises:
        LoopBusy: another run holds it; the message names it (command, pid, host, start).
    """
    engine = open_spine(settings).sessions.kw["bind"]
    with exclusive(engine, LOOP_LOCK, what):
        yield
