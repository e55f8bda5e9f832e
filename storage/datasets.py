"""Versioned datasets: immutable, content-addressed snapshots of the kept samples, with lineage.

The model is lakeFS / DVC / Delta Lake / the Hugging Face Hub on our spine:

- A version's rows are the samples curation kept (selected by round), split train/val by
  query (no query is in both), written as Parquet shards (polars) under their sha256.
- Shards are partitioned by (split, round, category) and cut inside a partition where a
  row's uid hash says so (content-defined chunking), so a new version re-uses every
  shard whose rows did not change, however many rows were added elsewhere.
- The manifest lists the shards with their sha256 and row counts, the splits, the schema,
  the filters and thresholds, the lineage and the config hash. It holds no timestamps,
  so rebuilding from the same inputs and configuration gives the same manifest hash.
  It is stored in the object store, and its hash in `dataset_version`.
- Publishing first claims the next version number as a draft (the unique key on
  (dataset, version) makes a racing publisher fail with `VersionConflict`, and so does
  finding another publisher's draft in flight), then writes the shards and the manifest,
  then seals. A rerun after a crash resumes its draft.
- A sealed version is immutable: database triggers refuse any change to it or to its
  shard list, whoever writes (`SealedVersion`).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from storage.db import insert_ignore, transaction
from storage.keys import blob_key, manifest_key, sha256_hex, shard_key
from storage.models import (
    Dataset,
    DatasetVersion,
    Episode,
    Judgment,
    Policy,
    Round,
    Sample,
    Shard,
    VersionShard,
)
from storage.objectstore import ObjectStore
from storage.rounds import CURATED, FIXES, JUDGED, round_stages
from trajforge.errors import DatasetError, SealedVersion, TrajforgeError, UnknownVersion, VersionConflict
from trajforge.logs import counts

SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "uid": pl.Utf8,
    "split": pl.Utf8,
    "round": pl.Int64,
    "category": pl.Utf8,
    "query": pl.Utf8,
    "episode": pl.Utf8,
    "step": pl.Int64,
    "weight": pl.Float64,
    "images": pl.List(pl.Utf8),
    "prompt": pl.Utf8,
    "response": pl.Utf8,
    "payload": pl.Utf8,  # the sample's full payload, JSON
    "provenance": pl.Utf8,  # JSON
    "content": pl.Utf8,  # sha256 of what the row says: diff's "changed"
}
MANIFEST_FORMAT = "trajforge-manifest/1"
log = logging.getLogger("trajforge.datasets")


@dataclass(frozen=True)
class PublishConfig:
    rounds: tuple[int, ...] | None = None  # round numbers; None: every round
    val_fraction: float = 0.1
    chunk_rows: int = 4096  # average rows per shard inside a partition
    max_shard_rows: int = 65536
    filters: dict[str, Any] = field(default_factory=dict)  # the thresholds the samples passed
    statuses: tuple[str, ...] = ("kept",)  # ("kept", "dropped"): filtering off, for ablations

    def as_dict(self) -> dict[str, Any]:
        return {
            "rounds": list(self.rounds) if self.rounds is not None else None,
            "val_fraction": self.val_fraction,
            "chunk_rows": self.chunk_rows,
            "max_shard_rows": self.max_shard_rows,
            "filters": self.filters,
            "statuses": list(self.statuses),
        }

    @property
    def config_hash(self) -> str:
        return sha256_hex(canonical(self.as_dict()))


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

    def render(self) -> str:
        reuse = self.shards_reused / self.shards if self.shards else 0.0
        return (
            f"{self.dataset} v{self.version} sealed: {self.rows} rows in {self.shards} shards "
            f"({self.shards_reused} reused from earlier versions, {reuse:.0%}); "
            + ", ".join(f"{k}={v}" for k, v in sorted(self.splits.items()))
            + f"; manifest sha256 {self.manifest_sha256[:16]}"
            + (f"; {self.shards_repaired} corrupt stored shards rewritten" if self.shards_repaired else "")
        )


def canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def split_of(query_uid: str, val_fraction: float) -> str:
    """train or val, decided by the query alone: all samples of a query land in one split."""
    bucket = int(hashlib.sha256(f"split:{query_uid}".encode()).hexdigest()[:8], 16) / 16**8
    return "val" if bucket < val_fraction else "train"


def _boundary(uid: str, chunk_rows: int) -> bool:
    return int(hashlib.sha256(f"chunk:{uid}".encode()).hexdigest()[:8], 16) % max(chunk_rows, 1) == 0


def selected_rows(
    sessions: sessionmaker[Session], config: PublishConfig, batch: int = 5000
) -> Iterator[dict[str, Any]]:
    """The kept samples of the selected rounds as dataset rows, ordered by partition then uid."""
    stmt = (
        select(
            Sample.uid,
            Sample.category,
            Sample.step_index,
            Sample.weight,
            Sample.payload,
            Sample.provenance,
            Round.number,
            Episode.uid,
        )
        .join(Round, Round.id == Sample.round_id)
        .outerjoin(Episode, Episode.id == Sample.episode_id)
        .where(Sample.status.in_(config.statuses))
        .order_by(Round.number, Sample.category, Sample.uid)
    )
    if config.rounds is not None:
        stmt = stmt.where(Round.number.in_(config.rounds))
    with sessions() as s:  # plain columns, streamed: no ORM objects for a million rows
        for uid, category, step, weight, payload, prov, number, episode in s.execute(
            stmt.execution_options(yield_per=batch)
        ):
            query = str(prov.get("query") or "")
            row = {
                "uid": uid,
                "split": split_of(query, config.val_fraction),
                "round": number,
                "category": category,
                "query": query,
                "episode": episode or str(prov.get("episode") or ""),
                "step": step,
                "weight": float(weight),
                "images": list(payload.get("images", [])),
                "prompt": str(payload.get("prompt", "")),
                "response": str(payload.get("response", "")),
                "payload": canonical(payload).decode(),
                "provenance": canonical(prov).decode(),
            }
            row["content"] = sha256_hex(canonical([row["payload"], row["weight"], row["split"]]))
            yield row


def shard_bytes(rows: list[dict[str, Any]]) -> bytes:
    buf = io.BytesIO()
    pl.DataFrame(rows, schema=SCHEMA).write_parquet(buf, compression="zstd", statistics=False)
    return buf.getvalue()


def _chunks(rows: Iterator[dict[str, Any]], config: PublishConfig) -> Iterator[list[dict[str, Any]]]:
    """Content-defined shards per (split, round, category) partition; memory: one open shard each."""
    open_: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    partition: tuple[int, str] | None = None
    for row in rows:
        if partition != (row["round"], row["category"]):
            yield from (chunk for chunk in open_.values() if chunk)
            open_, partition = {}, (row["round"], row["category"])
        chunk = open_.setdefault((row["split"], row["round"], row["category"]), [])
        chunk.append(row)
        if _boundary(row["uid"], config.chunk_rows) or len(chunk) >= config.max_shard_rows:
            yield chunk
            open_[(row["split"], row["round"], row["category"])] = []
    yield from (chunk for chunk in open_.values() if chunk)


def _lineage(sessions: sessionmaker[Session], rounds: list[int]) -> dict[str, Any]:
    with sessions() as s:
        policies = s.execute(
            select(Round.number, Policy.name, Policy.version, Round.config_hash)
            .join(Policy, Policy.id == Round.policy_id)
            .where(Round.number.in_(rounds))
            .order_by(Round.number)
        ).all()
        critics = s.execute(
            select(Judgment.critic, Judgment.critic_version)
            .join(Episode, (Judgment.target == "episode") & (Judgment.target_id == Episode.id))
            .join(Round, Round.id == Episode.round_id)
            .where(Round.number.in_(rounds))
            .distinct()
        ).all()
    return {
        "rounds": rounds,
        "policies": [{"round": n, "policy": name, "version": v} for n, name, v, _ in policies],
        "critics": sorted(f"{c}:{v}" for c, v in critics),
    }


def publish(
    sessions: sessionmaker[Session],
    store: ObjectStore,
    name: str,
    config: PublishConfig | None = None,
    description: str = "",
) -> PublishReport:
    """Publish the next version of dataset `name` from the kept samples (see the module docstring).

    Every check runs before the version number is claimed: the rounds exist and are judged and
    curated, there are rows, and every screenshot the rows name is in the store. Shards are
    staged on local disk meanwhile, so a refusal writes nothing. A shard already in the store
    is re-hashed; one that no longer matches its key (truncated, overwritten) is rewritten from
    the freshly built bytes, which are exactly what its key names.

    Raises:
        DatasetError: a check failed; the message names the fix.
        VersionConflict: another publisher sealed or claimed that version number first.
    """
    config = config or PublishConfig()
    rounds = _check_rounds(sessions, config)
    with tempfile.TemporaryDirectory(prefix="trajforge-publish-") as tmp:
        staging = Path(tmp)
        shards, images = _stage(sessions, config, staging)
        if not shards:
            raise DatasetError(
                f"nothing to publish: rounds {_numbers(rounds)} have no {'/'.join(config.statuses)} samples"
            )
        _check_images(store, images)
        version_id, number, parent, resumed = _claim(sessions, name, config, description)
        known = _known_shards(sessions)
        repaired = 0
        for sh in shards:
            data = (staging / sh["sha256"]).read_bytes()
            if store.exists(sh["key"]):
                if sha256_hex(store.get(sh["key"])) == sh["sha256"]:
                    continue
                log.warning("shard %s no longer matches its hash in the store; rewriting it", sh["key"])
                repaired += 1
            store.put(sh["key"], data, "application/vnd.apache.parquet")
    splits: Counter[str] = Counter()
    categories: Counter[str] = Counter()
    for sh in shards:
        splits[sh["split"]] += sh["rows"]
        categories[sh["category"]] += sh["rows"]
    parent_info = None
    if parent is not None:
        parent_info = {"version": parent.version, "manifest_sha256": parent.manifest_sha256}
    manifest = {
        "format": MANIFEST_FORMAT,
        "dataset": name,
        "version": number,
        "parent": parent_info,
        "config_hash": config.config_hash,
        "config": config.as_dict(),
        "schema": {k: str(v) for k, v in SCHEMA.items()},
        "rows": sum(splits.values()),
        "splits": dict(sorted(splits.items())),
        "categories": dict(sorted(categories.items())),
        "lineage": _lineage(sessions, sorted({sh["round"] for sh in shards})),
        "shards": shards,
    }
    body = canonical(manifest)
    digest = sha256_hex(body)
    key = manifest_key(name, number)
    if store.exists(key) and sha256_hex(store.get(key)) != digest:
        raise SealedVersion(f"dataset {name} v{number}: a different manifest is already stored at {key}")
    store.put(key, body, "application/json")
    with transaction(sessions) as s:
        insert_ignore(  # shards other versions already hold are left as they are
            s,
            Shard,
            [
                {
                    "sha256": sh["sha256"],
                    "object_key": sh["key"],
                    "rows": sh["rows"],
                    "split": sh["split"],
                    "format": "parquet",
                }
                for sh in shards
            ],
            ["sha256"],
        )
        ids = _shard_ids(s, [sh["sha256"] for sh in shards])
        insert_ignore(
            s,
            VersionShard,
            [{"version_id": version_id, "shard_id": ids[sh["sha256"]]} for sh in shards],
            ["version_id", "shard_id"],
        )
        sealed = s.execute(
            update(DatasetVersion)
            .where(DatasetVersion.id == version_id, DatasetVersion.status == "draft")
            .values(
                status="sealed",
                manifest_key=key,
                manifest_sha256=digest,
                lineage=manifest["lineage"],
                sealed_at=datetime.now(UTC),
            )
        )
        if sealed.rowcount != 1:  # type: ignore[attr-defined]
            raise VersionConflict(f"dataset {name} v{number} was sealed by another publisher; publish again")
    reused = sum(1 for sh in shards if sh["sha256"] in known)
    return PublishReport(
        name, number, digest, sum(splits.values()), len(shards), reused, dict(splits), resumed, repaired
    )


def _numbers(rounds: list[int]) -> str:
    return ",".join(map(str, rounds)) or "none"


def _check_rounds(sessions: sessionmaker[Session], config: PublishConfig) -> list[int]:
    """The round numbers to publish; each must exist and be judged and curated."""
    stages = round_stages(sessions)
    if not stages:
        raise DatasetError("nothing to publish: the database has no rounds yet; run `trajforge evolve` first")
    wanted = sorted(config.rounds) if config.rounds is not None else sorted(stages)
    missing = [n for n in wanted if n not in stages]
    if missing:
        raise DatasetError(
            f"no round {_numbers(missing)} in the database (rounds: {_numbers(sorted(stages))}); "
            "pick existing rounds with --rounds"
        )
    for n in wanted:
        for stage in (JUDGED, CURATED):
            if stage not in stages[n]:
                raise DatasetError(
                    f"round {n} is not {stage} yet; run `{FIXES[stage].format(n=n)}` first, "
                    "or leave it out with --rounds"
                )
    return wanted


def _stage(
    sessions: sessionmaker[Session], config: PublishConfig, staging: Path
) -> tuple[list[dict[str, Any]], set[str]]:
    """Build every shard into `staging` (memory: one shard); the shard list and every image named."""
    shards: list[dict[str, Any]] = []
    images: set[str] = set()
    for chunk in _chunks(selected_rows(sessions, config), config):
        data = shard_bytes(chunk)
        digest = sha256_hex(data)
        (staging / digest).write_bytes(data)
        for row in chunk:
            images.update(row["images"])
        first = chunk[0]
        shards.append(
            {
                "sha256": digest,
                "key": shard_key(digest),
                "rows": len(chunk),
                "split": first["split"],
                "round": first["round"],
                "category": first["category"],
            }
        )
    return shards, images


def missing_images(store: ObjectStore, images: Iterable[str]) -> list[str]:
    """The screenshots (by sha256) that are not in the store."""
    return sorted(sha for sha in set(images) if not store.exists(blob_key(sha)))


def _check_images(store: ObjectStore, images: set[str]) -> None:
    missing = missing_images(store, images)
    if missing:
        raise DatasetError(
            f"{len(missing)} of {len(images)} screenshots the samples refer to are missing from the "
            f"object store (first: {blob_key(missing[0])}); restore them into the store "
            "(or point TRAJFORGE_STORE_* at the store the rounds were rolled out with), then publish again"
        )


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


@dataclass(frozen=True)
class VersionRef:
    name: str
    version: int
    status: str
    manifest_sha256: str | None
    manifest_key: str | None
    created: datetime
    sealed_at: datetime | None


def list_versions(sessions: sessionmaker[Session], name: str | None = None) -> list[VersionRef]:
    with sessions() as s:
        stmt = select(Dataset.name, DatasetVersion).join(Dataset, Dataset.id == DatasetVersion.dataset_id)
        if name is not None:
            stmt = stmt.where(Dataset.name == name)
        return [
            VersionRef(n, v.version, v.status, v.manifest_sha256, v.manifest_key, v.created, v.sealed_at)
            for n, v in s.execute(stmt.order_by(Dataset.name, DatasetVersion.version))
        ]


def manifest(sessions: sessionmaker[Session], store: ObjectStore, name: str, version: int) -> dict[str, Any]:
    """The sealed version's manifest, checked against the hash in the database."""
    refs = [r for r in list_versions(sessions, name) if r.version == version]
    if not refs:
        known = ", ".join(f"v{r.version}" for r in list_versions(sessions, name)) or "none"
        raise UnknownVersion(f"dataset {name!r} has no version {version} (versions: {known})")
    ref = refs[0]
    if ref.status != "sealed" or ref.manifest_key is None:
        raise UnknownVersion(f"dataset {name} v{version} is a draft (an unfinished publish); publish again")
    body = store.get(ref.manifest_key)
    if sha256_hex(body) != ref.manifest_sha256:
        raise DatasetError(f"dataset {name} v{version}: the stored manifest does not match its recorded hash")
    data: dict[str, Any] = json.loads(body)
    return data


def read_shard(store: ObjectStore, shard: dict[str, Any], columns: list[str] | None = None) -> pl.DataFrame:
    """A shard's rows, after checking its bytes against the manifest's sha256.

    Raises:
        DatasetError: the stored shard is damaged (names `datasets verify` and how to repair).
    """
    data = store.get(shard["key"])
    if sha256_hex(data) != shard["sha256"]:
        raise DatasetError(
            f"shard {shard['key']} is damaged in the object store (its sha256 no longer matches the "
            "manifest); `trajforge datasets verify` lists every damaged shard, and publishing any "
            "version again rewrites them from the database"
        )
    return pl.read_parquet(io.BytesIO(data), columns=columns)


def iter_rows(store: ObjectStore, man: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every row of a version, one shard in memory at a time."""
    for shard in man["shards"]:
        yield from read_shard(store, shard).iter_rows(named=True)


def verify(sessions: sessionmaker[Session], store: ObjectStore, name: str, version: int) -> list[str]:
    """Problems found re-hashing every shard against the manifest and looking up every screenshot
    its rows name (empty: the version is intact and exportable)."""
    man = manifest(sessions, store, name, version)
    problems = []
    images: set[str] = set()
    for shard in man["shards"]:
        try:
            data = store.get(shard["key"])
        except TrajforgeError as exc:
            problems.append(f"{shard['key']}: unreadable ({exc})")
            continue
        if sha256_hex(data) != shard["sha256"]:
            problems.append(
                f"{shard['key']}: sha256 {sha256_hex(data)[:16]}… differs from the manifest's "
                f"{shard['sha256'][:16]}…"
            )
            continue
        frame = pl.read_parquet(io.BytesIO(data), columns=["images"])
        if frame.height != shard["rows"]:
            problems.append(f"{shard['key']}: row count differs from the manifest's {shard['rows']}")
        images.update(sha for row in frame["images"] for sha in row)
    problems += [f"{blob_key(sha)}: screenshot missing" for sha in missing_images(store, images)]
    return problems


@dataclass
class Diff:
    added: Counter[str] = field(default_factory=Counter)  # by category
    removed: Counter[str] = field(default_factory=Counter)
    changed: Counter[str] = field(default_factory=Counter)
    removed_reasons: Counter[str] = field(default_factory=Counter)
    shared_shards: int = 0

    def render(self, a: int, b: int) -> str:
        return "\n".join(
            [
                f"v{a} -> v{b}: {self.shared_shards} shards shared",
                f"added   {sum(self.added.values())}: {counts(self.added)}",
                f"removed {sum(self.removed.values())}: {counts(self.removed)}",
                f"  by reason: {counts(self.removed_reasons)}",
                f"changed {sum(self.changed.values())}: {counts(self.changed)}",
            ]
        )


def diff(sessions: sessionmaker[Session], store: ObjectStore, name: str, a: int, b: int) -> Diff:
    """Samples added, removed and changed from version a to b, by category; removals by reason."""
    old, new = manifest(sessions, store, name, a), manifest(sessions, store, name, b)
    shared = {s["sha256"] for s in old["shards"]} & {s["sha256"] for s in new["shards"]}
    result = Diff(shared_shards=len(shared))

    def index(man: dict[str, Any]) -> dict[str, tuple[str, str]]:
        out: dict[str, tuple[str, str]] = {}
        for shard in man["shards"]:
            if shard["sha256"] not in shared:  # rows of shared shards are identical on both sides
                df = read_shard(store, shard, ["uid", "category", "content"])
                out.update(zip(df["uid"], zip(df["category"], df["content"], strict=True), strict=True))
        return out

    before, after = index(old), index(new)
    for uid, (category, content) in after.items():
        if uid not in before:
            result.added[category] += 1
        elif before[uid][1] != content:
            result.changed[category] += 1
    gone = [uid for uid in before if uid not in after]
    for uid in gone:
        result.removed[before[uid][0]] += 1
    with sessions() as s:
        reasons: dict[str, str | None] = {}
        for start in range(0, len(gone), 500):
            chunk = gone[start : start + 500]
            rows = s.execute(select(Sample.uid, Sample.reason).where(Sample.uid.in_(chunk)))
            reasons.update({uid: reason for uid, reason in rows})
    for uid in gone:
        result.removed_reasons[reasons.get(uid) or "not_selected"] += 1
    return result
