"""Versioned datasets: immutable, content-addressed snapshots of the kept samples, with lineage.

The model is lakeFS / DVC / Delta Lake / the Hugging Face Hub on our spine. Versions are
made by `publish.versions`; this module reads them:

- The manifest lists the shards with their sha256 and row counts, the splits, the schema,
  the filters and thresholds, the lineage and the config hash. It is stored in the object
  store, and its hash in `dataset_version`; `manifest` checks one against the other.
- A shard is read only after its bytes re-hash to the manifest's sha256 (`read_shard`);
  `verify` re-hashes every shard and looks up every screenshot the rows name.
- `diff` says what was added, removed (by reason) and changed between two versions.
- A sealed version is immutable: database triggers refuse any change to it or to its
  shard list, whoever writes (`SealedVersion`).
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.keys import blob_key, sha256_hex
from storage.models import Dataset, DatasetVersion, Sample
from storage.objectstore import ObjectStore
from trajforge.errors import DatasetError, TrajforgeError, UnknownVersion
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


def canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


class ShardRef(BaseModel):
    """One shard as the manifest lists it: its rows sit in one partition (split, round, category)."""

    model_config = ConfigDict(frozen=True)

    sha256: str = Field(description="Of the shard's parquet bytes; also its object key's name.")
    key: str = Field(description="Where the shard is in the object store.")
    rows: int = Field(ge=1)
    split: str = Field(description="train | val")
    round: int
    category: str


class PolicyRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    round: int
    policy: str
    version: int


class Lineage(BaseModel):
    """Where the rows come from: the rounds, each round's policy, the critics that judged them."""

    model_config = ConfigDict(frozen=True)

    rounds: list[int]
    policies: list[PolicyRef]
    critics: list[str] = Field(description="name:version of every episode critic that judged the rounds.")
    sampling: list[dict[str, Any]] | None = Field(
        None, description="The policies' sampling parameters by round; absent for offline rounds."
    )
    made_with: dict[str, Any] | None = Field(
        None,
        description="How the rows were made (`publish.card`): trajforge's version, each round's seed and "
        "served models, each model family's prompt source and coordinate space; absent in "
        "versions sealed before it was recorded.",
    )

    def as_json(self) -> dict[str, Any]:
        # manifests of offline rounds stay as they were: no sampling key
        unset = {k for k in ("sampling", "made_with") if getattr(self, k) is None}
        return self.model_dump(mode="json", exclude=unset)


class ParentRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: int
    manifest_sha256: str


class Manifest(BaseModel):
    """A sealed version's manifest (`MANIFEST_FORMAT`); `body` is the JSON stored and hashed."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    format: str = MANIFEST_FORMAT
    dataset: str
    version: int
    parent: ParentRef | None
    config_hash: str
    config: dict[str, Any] = Field(description="The `PublishConfig` (`as_dict`).")
    columns: dict[str, str] = Field(alias="schema", description="Column name to polars type.")
    rows: int
    splits: dict[str, int]
    categories: dict[str, int]
    lineage: Lineage
    shards: list[ShardRef]

    def body(self) -> bytes:
        return canonical({**self.model_dump(mode="json", by_alias=True), "lineage": self.lineage.as_json()})


def missing_images(store: ObjectStore, images: Iterable[str]) -> list[str]:
    """The screenshots (by sha256) that are not in the store."""
    return sorted(sha for sha in set(images) if not store.exists(blob_key(sha)))


def require_images(store: ObjectStore, images: set[str]) -> None:
    """Raises DatasetError, naming the fix, when a screenshot the rows name is not in the store."""
    missing = missing_images(store, images)
    if missing:
        raise DatasetError(
            f"{len(missing)} of {len(images)} screenshots the samples refer to are missing from the "
            f"object store (first: {blob_key(missing[0])}); restore them into the store "
            "(or point TRAJFORGE_STORE_* at the store the rounds were rolled out with), then publish again"
        )


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


def manifest(sessions: sessionmaker[Session], store: ObjectStore, name: str, version: int) -> Manifest:
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
    return Manifest.model_validate_json(body)


def read_shard(store: ObjectStore, shard: ShardRef, columns: list[str] | None = None) -> pl.DataFrame:
    """A shard's rows, after checking its bytes against the manifest's sha256.

    Raises:
        DatasetError: the stored shard is damaged (names `datasets verify` and how to repair).
    """
    data = store.get(shard.key)
    if sha256_hex(data) != shard.sha256:
        raise DatasetError(
            f"shard {shard.key} is damaged in the object store (its sha256 no longer matches the "
            "manifest); `trajforge datasets verify` lists every damaged shard, and publishing any "
            "version again rewrites them from the database"
        )
    return pl.read_parquet(io.BytesIO(data), columns=columns)


def iter_rows(store: ObjectStore, man: Manifest) -> Iterator[dict[str, Any]]:
    """Every row of a version, one shard in memory at a time."""
    for shard in man.shards:
        yield from read_shard(store, shard).iter_rows(named=True)


def verify(sessions: sessionmaker[Session], store: ObjectStore, name: str, version: int) -> list[str]:
    """Problems found re-hashing every shard against the manifest and looking up every screenshot
    its rows name (empty: the version is intact and exportable)."""
    man = manifest(sessions, store, name, version)
    problems = []
    images: set[str] = set()
    for shard in man.shards:
        try:
            data = store.get(shard.key)
        except TrajforgeError as exc:
            problems.append(f"{shard.key}: unreadable ({exc})")
            continue
        if sha256_hex(data) != shard.sha256:
            problems.append(
                f"{shard.key}: sha256 {sha256_hex(data)[:16]}… differs from the manifest's "
                f"{shard.sha256[:16]}…"
            )
            continue
        frame = pl.read_parquet(io.BytesIO(data), columns=["images"])
        if frame.height != shard.rows:
            problems.append(f"{shard.key}: row count differs from the manifest's {shard.rows}")
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
    shared = {s.sha256 for s in old.shards} & {s.sha256 for s in new.shards}
    result = Diff(shared_shards=len(shared))

    def index(man: Manifest) -> dict[str, tuple[str, str]]:
        out: dict[str, tuple[str, str]] = {}
        for shard in man.shards:
            if shard.sha256 not in shared:  # rows of shared shards are identical on both sides
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
