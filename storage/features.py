"""Which featuriser a run uses (`trajforge.features`), and its vectors cached by screenshot hash
across all rounds.

By default the featuriser is the screen encoder the engine trained on the store's own
screenshots (`curation.encoder`, `storage.encoders`), else a local checkpoint such as an
ImageNet ResNet-50 (`curate.resnet_weights`). Until an encoder is trained the
engine uses a weights-free feature and logs why: a DCT perceptual hash (`phash`), or a
grey thumbnail (`thumb`). Every vector is float32 and L2-normalised, so an inner product
is a cosine.

`FeatureStore` computes each screenshot once: hashes seen twice in a request are
embedded once, and hashes in the `screen_feature` table are never embedded again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.db import insert_ignore, transaction
from storage.encoders import fetch_encoder, latest_encoder
from storage.models import ScreenFeature
from storage.objectstore import ObjectStore
from trajforge.features import Featurizer, PHashFeaturizer, ResNetFeaturizer, ThumbFeaturizer, Vectoriser
from trajforge.progress import track

if TYPE_CHECKING:
    from trajforge.settings import CurationSettings

log = logging.getLogger("trajforge.features")
_IN_CHUNK = 500  # hashes per IN (...) lookup


def make_featurizer(
    settings: CurationSettings,
    sessions: sessionmaker[Session] | None = None,
    store: ObjectStore | None = None,
) -> Featurizer:
    """The configured featuriser. `resnet` uses `resnet_weights` when set, else the latest encoder
    trained on this store; with none trained yet it falls back to phash and logs why."""
    if settings.featurizer == "thumb":
        return ThumbFeaturizer()
    if settings.featurizer == "phash":
        return PHashFeaturizer()
    if settings.resnet_weights:
        return ResNetFeaturizer.load(settings.resnet_weights, settings.batch_size, settings.threads)
    encoder = latest_encoder(sessions) if sessions is not None and store is not None else None
    if encoder is None or store is None:
        log.info(
            "curate.featurizer resnet: no screen encoder trained on this store yet (`trajforge curate "
            "train-encoder` trains one; evolve does after round 1); dedup uses phash for now"
        )
        return PHashFeaturizer()
    with fetch_encoder(store, encoder) as folder:
        featurizer = ResNetFeaturizer.load(folder, settings.batch_size, settings.threads)
    featurizer.key = f"resnet:{encoder.sha256[:24]}"  # the weights, not the temporary folder
    return featurizer


def dedup_threshold(settings: CurationSettings, featurizer: Featurizer) -> float:
    """`curate.dedup_threshold` when set, else the featuriser's own."""
    return featurizer.threshold if settings.dedup_threshold is None else settings.dedup_threshold


@dataclass
class CacheStats:
    requested: int = 0  # screenshot references asked for
    unique: int = 0  # distinct hashes among them
    cached: int = 0  # distinct hashes already in the table
    computed: int = 0  # distinct hashes embedded now

    @property
    def avoided(self) -> float:
        """Fraction of the requested embeddings not computed (hash dedup + cache)."""
        return 1 - self.computed / self.requested if self.requested else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "avoided": round(self.avoided, 4)}


class FeatureStore:
    """Vectors by screenshot hash: from the table when known, else embedded once and stored."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        featurizer: Vectoriser,
        frames: Callable[[str], bytes],
        batch: int = 256,
    ) -> None:
        self.sessions, self.featurizer, self.frames, self.batch = sessions, featurizer, frames, batch
        self.stats = CacheStats()

    def vectors(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        wanted = list(hashes)
        unique = list(dict.fromkeys(wanted))
        found = self._load(unique)
        missing = [h for h in unique if h not in found]
        with track("screenshot features", len(missing)) as advance:
            for start in range(0, len(missing), self.batch):
                chunk = missing[start : start + self.batch]
                vecs = self.featurizer.embed([self.frames(h) for h in chunk])
                rows = [
                    {"featurizer": self.featurizer.key, "sha256": h, "vector": v.astype(np.float32).tobytes()}
                    for h, v in zip(chunk, vecs, strict=True)
                ]
                with transaction(self.sessions) as s:
                    insert_ignore(s, ScreenFeature, rows, ["featurizer", "sha256"])
                found.update(zip(chunk, vecs, strict=True))
                advance(len(chunk))
        self.stats.requested += len(wanted)
        self.stats.unique += len(unique)
        self.stats.cached += len(unique) - len(missing)
        self.stats.computed += len(missing)
        return found

    def _load(self, unique: list[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self.sessions() as s:
            for start in range(0, len(unique), _IN_CHUNK):
                chunk = unique[start : start + _IN_CHUNK]
                for sha, blob in s.execute(
                    select(ScreenFeature.sha256, ScreenFeature.vector).where(
                        ScreenFeature.featurizer == self.featurizer.key, ScreenFeature.sha256.in_(chunk)
                    )
                ):
                    found[sha] = np.frombuffer(blob, dtype=np.float32)
        return found
