"""Publishing a dataset version from the kept samples (read it back with `storage.datasets`).

- A version's rows are the samples curation kept (selected by round), split train/val by
  query (no query is in both), written as Parquet shards (polars) under their sha256.
- Shards are partitioned by (split, round, category) and cut inside a partition where a
  row's uid hash says so (content-defined chunking, `publish.shards`), so a new version
  re-uses every shard whose rows did not change, however many rows were added elsewhere.
- The manifest holds no timestamps, so rebuilding from the same inputs and configuration
  gives the same manifest hash.
- Nothing that should not be sealed is: before a version number is claimed, the rounds must
  exist and be judged and curated, there must be rows, and every screenshot the rows name
  must be in the store. Shards are staged on local disk meanwhile, so a refusal writes nothing.
- Publishing then claims the next version number as a draft (the unique key on
  (dataset, version) makes a racing publisher fail with `VersionConflict`, and so does
  finding another publisher's draft in flight), writes the shards and the manifest, and
  seals. A rerun after a crash resumes its draft.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from publish.card import lineage
from publish.shards import PublishConfig, chunks, selected_rows, shard_bytes, write_shards
from storage.datasets import (
    SCHEMA,
    Lineage,
    Manifest,
    ParentRef,
    ShardRef,
    VersionRef,
    list_versions,
    manifest,
    require_images,
)
from storage.db import insert_ignore, transaction
from storage.keys import manifest_key, sha256_hex, shard_key
from storage.models import (
    Dataset,
    DatasetVersion,
    Shard,
    VersionShard,
)
from storage.objectstore import ObjectStore
from storage.rounds import numbers, ready_rounds
from trajforge.errors import DatasetError, ObjectNotFound, SealedVersion, VersionConflict
from trajforge.progress import counted
from trajforge.stage_settings import dataset_name_problem

SEALED_AFTER = ("judge", "calibrate", "curate")  # the stages a round has been through before it is sealed


@dataclass
class PublishReport:
    dataset: str
    version: int
    manifest_sha256: str
    rows: int
    shards: int
    shards_reused: int
    splits: dict[str, int]
    resumed: bool = False
    shards_repaired: int = 0  # stored shards that no longer matched their hash, rewritten
    unchanged: bool = False  # the latest version already holds these rows: nothing was sealed

    def render(self) -> str:
        reuse = self.shards_reused / self.shards if self.shards else 0.0
        if self.unchanged:
            return (
                f"{self.dataset} v{self.version} unchanged: it already holds these {self.rows} rows under "
                "this configuration, so no new version was sealed"
                + (
                    f"; {self.shards_repaired} corrupt stored shards rewritten"
                    if self.shards_repaired
                    else ""
                )
            )
        return (
            f"{self.dataset} v{self.version} sealed: {self.rows} rows in {self.shards} shards "
            f"({self.shards_reused} reused from earlier versions, {reuse:.0%}); "
            + ", ".join(f"{k}={v}" for k, v in sorted(self.splits.items()))
            + f"; manifest sha256 {self.manifest_sha256[:16]}"
            + (f"; {self.shards_repaired} corrupt stored shards rewritten" if self.shards_repaired else "")
        )


def publish(
    sessions: sessionmaker[Session],
    store: ObjectStore,
    name: str,
    config: PublishConfig | None = None,
    description: str = "",
) -> PublishReport:
    """Publish the next version of dataset `name` from the kept samples (see the module docstring).

    Every check (`name` a plain name first) runs before the version number is claimed. A stored
    shard that no longer matches its key (truncated, overwritten) is rewritten from fresh bytes.

    Raises:
        DatasetError: a check failed; the message names the fix.
        VersionConflict: another publisher sealed or claimed that version number first.
    """
    if problem := dataset_name_problem(name):
        raise DatasetError(problem)
    config = config or PublishConfig()
    rounds = ready_rounds(sessions, config.rounds, SEALED_AFTER)
    with tempfile.TemporaryDirectory(prefix="trajforge-publish-") as tmp:
        staging = Path(tmp)
        shards, images = _stage(sessions, config, staging)
        if not shards:
            raise DatasetError(
                f"nothing to publish: rounds {numbers(rounds)} have no {'/'.join(config.statuses)} samples"
            )
        require_images(store, images)
        latest = _latest_sealed(sessions, store, name)
        if latest is not None and _same_rows(latest[1], config, shards):
            repaired = write_shards(store, staging, shards)  # a damaged one is still mended
            return _unchanged(*latest, len(shards), repaired)
        version_id, number, parent, resumed = _claim(sessions, name, config, description)
        known = _known_shards(sessions)
        repaired = write_shards(store, staging, shards)
    manifest = _manifest(sessions, name, number, parent, config, shards)
    body = manifest.body()
    digest = sha256_hex(body)
    key = manifest_key(name, number)
    if store.exists(key) and sha256_hex(store.get(key)) != digest:
        raise SealedVersion(f"dataset {name} v{number}: a different manifest is already stored at {key}")
    store.put(key, body, "application/json")
    _seal(sessions, shards, version_id, name, number, key, digest, manifest.lineage)
    reused = sum(1 for sh in shards if sh.sha256 in known)
    return PublishReport(
        name, number, digest, manifest.rows, len(shards), reused, dict(manifest.splits), resumed, repaired
    )


def _manifest(
    sessions: sessionmaker[Session],
    name: str,
    number: int,
    parent: DatasetVersion | None,
    config: PublishConfig,
    shards: list[ShardRef],
) -> Manifest:
    splits: Counter[str] = Counter()
    categories: Counter[str] = Counter()
    for sh in shards:
        splits[sh.split] += sh.rows
        categories[sh.category] += sh.rows
    return Manifest(
        dataset=name,
        version=number,
        parent=None
        if parent is None
        else ParentRef(version=parent.version, manifest_sha256=str(parent.manifest_sha256)),
        config_hash=config.config_hash,
        config=config.as_dict(),
        columns={k: str(v) for k, v in SCHEMA.items()},
        rows=sum(splits.values()),
        splits=dict(sorted(splits.items())),
        categories=dict(sorted(categories.items())),
        lineage=lineage(sessions, sorted({sh.round for sh in shards})),
        shards=shards,
    )


def _seal(
    sessions: sessionmaker[Session],
    shards: list[ShardRef],
    version_id: int,
    name: str,
    number: int,
    key: str,
    digest: str,
    lineage: Lineage,
) -> None:
    """Record the version's shards and seal it, in one transaction.

    Raises:
        VersionConflict: another publisher of the same draft sealed it first (the database's
            sealed-version triggers refuse the shard rows, or the draft is no longer a draft).
    """
    conflict = (
        f"dataset {name} v{number} was sealed by another publisher while this one was writing it; "
        "`trajforge datasets list` shows it (publish again: it makes a new version only if the rows changed)"
    )
    try:
        with transaction(sessions) as s:
            insert_ignore(  # shards other versions already hold are left as they are
                s,
                Shard,
                [
                    {
                        "sha256": sh.sha256,
                        "object_key": sh.key,
                        "rows": sh.rows,
                        "split": sh.split,
                        "format": "parquet",
                    }
                    for sh in shards
                ],
                ["sha256"],
            )
            ids = _shard_ids(s, [sh.sha256 for sh in shards])
            insert_ignore(
                s,
                VersionShard,
                [{"version_id": version_id, "shard_id": ids[sh.sha256]} for sh in shards],
                ["version_id", "shard_id"],
            )
            sealed = s.execute(
                update(DatasetVersion)
                .where(DatasetVersion.id == version_id, DatasetVersion.status == "draft")
                .values(
                    status="sealed",
                    manifest_key=key,
                    manifest_sha256=digest,
                    lineage=lineage.as_json(),
                    sealed_at=datetime.now(UTC),
                )
            )
            if sealed.rowcount != 1:  # type: ignore[attr-defined]
                raise VersionConflict(conflict)
    except SealedVersion as exc:  # the sealed-version triggers refused this publisher's shard rows
        raise VersionConflict(conflict) from exc


def _latest_sealed(
    sessions: sessionmaker[Session], store: ObjectStore, name: str
) -> tuple[VersionRef, Manifest] | None:
    """The dataset's latest sealed version and its manifest, checked in the store; None if none.

    Raises:
        DatasetError: that manifest is missing or damaged; a new version would silently build
            on a version nobody can read back.
    """
    sealed = [r for r in list_versions(sessions, name) if r.status == "sealed"]
    if not sealed:
        return None
    latest = sealed[-1]
    try:
        return latest, manifest(sessions, store, name, latest.version)
    except (ObjectNotFound, DatasetError) as exc:
        problem = "is missing from" if isinstance(exc, ObjectNotFound) else "does not match its hash in"
        raise DatasetError(
            f"dataset {name} v{latest.version}: its manifest {latest.manifest_key} {problem} the object "
            "store, so the next version cannot build on it; restore the object store from a backup "
            f"(`trajforge datasets verify {latest.version}` checks it), then publish again"
        ) from exc


def _same_rows(latest: Manifest, config: PublishConfig, shards: list[ShardRef]) -> bool:
    """Whether a new version would hold exactly the latest one's shards, under the same configuration."""
    same_shards = {sh.sha256 for sh in latest.shards} == {sh.sha256 for sh in shards}
    return same_shards and latest.config_hash == config.config_hash


def _unchanged(ref: VersionRef, latest: Manifest, shards: int, repaired: int) -> PublishReport:
    return PublishReport(
        ref.name,
        ref.version,
        str(ref.manifest_sha256),
        latest.rows,
        shards,
        shards,
        dict(latest.splits),
        shards_repaired=repaired,
        unchanged=True,
    )


def _stage(
    sessions: sessionmaker[Session], config: PublishConfig, staging: Path
) -> tuple[list[ShardRef], set[str]]:
    """Build every shard into `staging` (memory: one shard); the shard list and every image named."""
    shards: list[ShardRef] = []
    images: set[str] = set()
    for chunk in counted(chunks(selected_rows(sessions, config), config), "dataset shards"):
        data = shard_bytes(chunk)
        digest = sha256_hex(data)
        (staging / digest).write_bytes(data)
        for row in chunk:
            images.update(row["images"])
        first = chunk[0]
        shards.append(
            ShardRef(
                sha256=digest,
                key=shard_key(digest),
                rows=len(chunk),
                split=first["split"],
                round=first["round"],
                category=first["category"],
            )
        )
    return shards, images


def _shard_ids(s: Session, digests: list[str]) -> dict[str, int]:
    ids: dict[str, int] = {}
    for start in range(0, len(digests), 500):
        chunk = digests[start : start + 500]
        rows = s.execute(select(Shard.sha256, Shard.id).where(Shard.sha256.in_(chunk)))
        ids.update({sha: id_ for sha, id_ in rows})
    return ids


def _known_shards(sessions: sessionmaker[Session]) -> set[str]:
    with sessions() as s:
        return set(s.scalars(select(Shard.sha256)))


def _claim(
    sessions: sessionmaker[Session], name: str, config: PublishConfig, description: str
) -> tuple[int, int, DatasetVersion | None, bool]:
    """(version id, number, parent, resumed): resume our own draft, else claim the next number."""
    with transaction(sessions) as s:
        insert_ignore(s, Dataset, [{"name": name, "description": description}], ["name"])
    with sessions() as s:
        dataset_id = s.scalars(select(Dataset.id).where(Dataset.name == name)).one()
        parent = s.scalars(
            select(DatasetVersion)
            .where(DatasetVersion.dataset_id == dataset_id, DatasetVersion.status == "sealed")
            .order_by(DatasetVersion.version.desc())
            .limit(1)
        ).first()
        parent_id = parent.id if parent is not None else None
        draft = s.scalars(
            select(DatasetVersion).where(
                DatasetVersion.dataset_id == dataset_id,
                DatasetVersion.status == "draft",
                DatasetVersion.config_hash == config.config_hash,
                DatasetVersion.parent_id.is_(None)
                if parent_id is None
                else DatasetVersion.parent_id == parent_id,
            )
        ).first()
        if draft is not None:
            return draft.id, draft.version, parent, True
        other = s.scalars(  # another publisher's version in flight on the same parent: do not fork it
            select(DatasetVersion.version).where(
                DatasetVersion.dataset_id == dataset_id,
                DatasetVersion.status == "draft",
                DatasetVersion.version > (parent.version if parent is not None else 0),
            )
        ).first()
        if other is not None:
            raise VersionConflict(
                f"dataset {name} v{other} is being published by another run with another configuration; "
                "publish again once it is sealed (if that run died, rerun it with its configuration "
                "to finish it)"
            )
        # The number follows the parent, not the highest row: two publishers on the same parent
        # always claim the same number, so the unique key lets exactly one of them through.
        number = (parent.version if parent is not None else 0) + 1
    try:
        with transaction(sessions) as s:
            row = DatasetVersion(
                dataset_id=dataset_id, version=number, parent_id=parent_id, config_hash=config.config_hash
            )
            s.add(row)
            s.flush()
            return row.id, number, parent, False
    except IntegrityError as exc:
        raise VersionConflict(
            f"dataset {name} v{number} was claimed by another publisher at the same time; "
            "run publish again to make the next version"
        ) from exc
