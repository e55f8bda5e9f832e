"""Trained screen encoders in the store: checkpoint files in the object store, one row each.

A checkpoint is the folder transformers writes (`config.json`, `model.safetensors`) plus
the `trajforge_encoder.json` sidecar (input size, training facts). Its files go under
`encoders/<sha256>/`, where the hash covers every file, so the same weights are stored
once and a featuriser's cache key names exactly the weights that made the vectors.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.db import insert_ignore, transaction
from storage.keys import encoder_prefix
from storage.models import ScreenEncoder
from storage.objectstore import ObjectStore
from trajforge.features import SIDECAR

WEIGHTS = ("config.json", "model.safetensors")  # transformers' own files
CHECKPOINT_FILES = (*WEIGHTS, SIDECAR)


@dataclass(frozen=True)
class StoredEncoder:
    sha256: str
    prefix: str
    round_id: int | None
    facts: dict[str, Any]


def checkpoint_sha256(folder: Path) -> str:
    """Names the weights, the architecture and the input the encoder expects (not training timings)."""
    sidecar = json.loads((folder / SIDECAR).read_text())
    h = hashlib.sha256()
    for name in WEIGHTS:
        h.update(name.encode() + b"\0" + hashlib.sha256((folder / name).read_bytes()).digest())
    h.update(
        json.dumps(
            {k: sidecar.get(k) for k in ("width", "height", "rows", "bar", "threshold")}, sort_keys=True
        ).encode()
    )
    return h.hexdigest()


def save_encoder(
    sessions: sessionmaker[Session],
    store: ObjectStore,
    folder: Path,
    round_id: int | None,
    facts: dict[str, Any],
) -> StoredEncoder:
    """Upload a checkpoint folder and record it; saving the same weights again changes nothing."""
    missing = [n for n in CHECKPOINT_FILES if not (folder / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} is not an encoder checkpoint: {', '.join(missing)} missing")
    facts = json.loads(json.dumps(facts))  # as the row will read back (tuples become lists)
    sha = checkpoint_sha256(folder)
    prefix = encoder_prefix(sha)
    with sessions() as s:
        known = s.scalars(select(ScreenEncoder).where(ScreenEncoder.sha256 == sha)).first()
        if known is not None:  # the same weights: stored already, written once
            return StoredEncoder(known.sha256, known.prefix, known.round_id, dict(known.facts))
    for name in CHECKPOINT_FILES:  # files first: a row never points at a half-written checkpoint
        store.put(f"{prefix}/{name}", (folder / name).read_bytes())
    row = {"sha256": sha, "prefix": prefix, "round_id": round_id, "facts": facts}
    with transaction(sessions) as s:
        insert_ignore(s, ScreenEncoder, [row], ["sha256"])
    return StoredEncoder(sha, prefix, round_id, facts)


def latest_encoder(sessions: sessionmaker[Session]) -> StoredEncoder | None:
    with sessions() as s:
        row = s.scalars(select(ScreenEncoder).order_by(ScreenEncoder.id.desc()).limit(1)).first()
        return StoredEncoder(row.sha256, row.prefix, row.round_id, dict(row.facts)) if row else None


def fetch_encoder(store: ObjectStore, encoder: StoredEncoder) -> tempfile.TemporaryDirectory[str]:
    """The checkpoint's files in a temporary folder (removed when the returned object is cleaned up)."""
    folder = tempfile.TemporaryDirectory(prefix="trajforge-encoder-")
    for name in CHECKPOINT_FILES:
        Path(folder.name, name).write_bytes(store.get(f"{encoder.prefix}/{name}"))
    return folder
