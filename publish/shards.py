"""What a dataset version holds, and how it is cut into shards.

A version's rows are the kept samples of the selected rounds (`PublishConfig`), split
train/val by query (`split_of`: no query is in both), ordered by partition (split, round,
category) then uid, and cut inside a partition where a row's uid hash says so
(content-defined chunking, `chunks`), so unchanged rows land in unchanged shards.
"""

from __future__ import annotations

import hashlib
import io
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.datasets import SCHEMA, ShardRef, canonical
from storage.keys import sha256_hex
from storage.models import Episode, Round, Sample
from storage.objectstore import ObjectStore

log = logging.getLogger("trajforge.publish")


class PublishConfig(BaseModel):
    """What a dataset version selects and how it is cut (recorded in its manifest by `as_dict`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rounds: tuple[int, ...] | None = Field(None, description="Round numbers to publish; None: every round.")
    val_fraction: float = Field(
        0.1, ge=0, lt=1, description="Share of queries whose samples go to the val split (by query)."
    )
    chunk_rows: int = Field(4096, ge=1, description="Average rows per shard inside a partition.")
    max_shard_rows: int = Field(65536, ge=1, description="No shard holds more rows than this.")
    filters: dict[str, Any] = Field(
        default_factory=dict, description="The thresholds the samples passed, as the manifest records them."
    )
    statuses: tuple[str, ...] = Field(
        ("kept",), description='Sample statuses published; ("kept", "dropped"): filtering off, for ablations.'
    )

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


def split_of(query_uid: str, val_fraction: float) -> str:
    """train or val, decided by the query alone: all samples of a query land in one split."""
    bucket = int(hashlib.sha256(f"split:{query_uid}".encode()).hexdigest()[:8], 16) / 16**8
    return "val" if bucket < val_fraction else "train"


def boundary(uid: str, chunk_rows: int) -> bool:
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


def chunks(rows: Iterator[dict[str, Any]], config: PublishConfig) -> Iterator[list[dict[str, Any]]]:
    """Content-defined shards per (split, round, category) partition; memory: one open shard each."""
    open_: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    partition: tuple[int, str] | None = None
    for row in rows:
        if partition != (row["round"], row["category"]):
            yield from (chunk for chunk in open_.values() if chunk)
            open_, partition = {}, (row["round"], row["category"])
        chunk = open_.setdefault((row["split"], row["round"], row["category"]), [])
        chunk.append(row)
        if boundary(row["uid"], config.chunk_rows) or len(chunk) >= config.max_shard_rows:
            yield chunk
            open_[(row["split"], row["round"], row["category"])] = []
    yield from (chunk for chunk in open_.values() if chunk)


def write_shards(store: ObjectStore, staging: Path, shards: list[ShardRef]) -> int:
    """Put every staged shard the store lacks; one stored under its key that no longer matches its
    hash (truncated, overwritten) is rewritten. Returns how many were rewritten."""
    repaired = 0
    for sh in shards:
        if store.exists(sh.key):
            if sha256_hex(store.get(sh.key)) == sh.sha256:
                continue
            log.warning("shard %s no longer matches its hash in the store; rewriting it", sh.key)
            repaired += 1
        store.put(sh.key, (staging / sh.sha256).read_bytes(), "application/vnd.apache.parquet")
    return repaired
