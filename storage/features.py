"""Screenshot features for trajectory dedup, cached by screenshot hash across all rounds.

AgentCPM-GUI §3.4 embeds each screenshot with ResNet-50 and averages a trajectory's
screenshots. `ResNetFeaturizer` does that with transformers' `ResNetModel` (batched CPU
inference at 224 px) from a local checkpoint or hub id; with no weights on the machine
the engine uses a weights-free feature instead: a grey thumbnail (`thumb`) or a DCT
perceptual hash (`phash`). Every vector is float32 and L2-normalised, so an inner
product is a cosine.

`FeatureStore` computes each screenshot once: hashes seen twice in a request are
embedded once, and hashes in the `screen_feature` table are never embedded again.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from PIL import Image
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.db import insert_ignore, transaction
from storage.models import ScreenFeature
from trajforge.errors import ConfigError

if TYPE_CHECKING:
    from trajforge.settings import CurationSettings

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
_IN_CHUNK = 500  # hashes per IN (...) lookup


class Featurizer(Protocol):
    key: str  # names the model and its configuration; the cache namespace
    dim: int

    def embed(self, images: list[bytes]) -> np.ndarray:
        """(len(images), dim) float32, rows L2-normalised."""
        ...


def _normalise(rows: np.ndarray) -> np.ndarray:
    rows = rows.astype(np.float32, copy=False)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    flat = norms[:, 0] < 1e-8  # a blank screen has no contrast: give it one fixed direction
    rows[flat] = 1.0
    norms[flat] = np.sqrt(rows.shape[1])
    return rows / norms


def _grey(png: bytes, size: tuple[int, int]) -> np.ndarray:
    img = Image.open(io.BytesIO(png)).convert("L").resize(size, Image.Resampling.BOX)
    return np.asarray(img, dtype=np.float32) / 255.0


class ThumbFeaturizer:
    """A 16x32 grey thumbnail (portrait, like a phone), centred: robust to small shifts."""

    key, dim = "thumb:16x32:1", 16 * 32

    def embed(self, images: list[bytes]) -> np.ndarray:
        rows = np.stack([_grey(png, (16, 32)).ravel() for png in images]) if images else np.zeros((0, 512))
        return _normalise(rows - rows.mean(axis=1, keepdims=True))


def _dct_matrix(n: int) -> np.ndarray:
    k = np.arange(n)[:, None]
    m = np.cos(np.pi * (2 * np.arange(n)[None, :] + 1) * k / (2 * n)) * np.sqrt(2 / n)
    m[0] /= np.sqrt(2)
    return m.astype(np.float32)


class PHashFeaturizer:
    """The classic 64-bit DCT perceptual hash as a ±1 vector: cosine = 1 - 2·hamming/64."""

    key, dim = "phash:64:1", 64
    _dct = _dct_matrix(32)

    def embed(self, images: list[bytes]) -> np.ndarray:
        rows = []
        for png in images:
            low = (self._dct @ _grey(png, (32, 32)) @ self._dct.T)[:8, :8].ravel()
            rows.append(np.where(low > np.median(low[1:]), 1.0, -1.0))
        return _normalise(np.array(rows, dtype=np.float32).reshape(len(images), 64))


class ResNetFeaturizer:
    """Pooled ResNet features at 224x224 (the whole screen squashed, nothing cropped away)."""

    def __init__(self, model: Any, identity: str, batch_size: int = 32, threads: int = 0) -> None:
        import torch

        self.model = model.eval()
        self.batch_size = batch_size
        self.dim = int(model.config.hidden_sizes[-1])
        self.key = f"resnet:{identity}"[:128]
        if threads:
            torch.set_num_threads(threads)

    @classmethod
    def load(cls, weights: str, batch_size: int = 32, threads: int = 0) -> ResNetFeaturizer:
        """From a local checkpoint directory or hub id (hub ids need a reachable hub)."""
        from transformers import ResNetModel

        try:
            model = ResNetModel.from_pretrained(weights)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"curate.resnet_weights = {weights!r}: cannot load a ResNet checkpoint ({exc}); give a "
                "local directory with config.json and the weights, or set curate.featurizer to thumb"
            ) from exc
        identity = hashlib.sha256(f"{weights}\n{model.config.to_json_string()}".encode()).hexdigest()[:16]
        return cls(model, identity, batch_size, threads)

    @classmethod
    def random(cls, config: Any, seed: int = 0, batch_size: int = 32, threads: int = 0) -> ResNetFeaturizer:
        """A randomly initialised model (tests and benchmarks: no weights on this machine)."""
        import torch
        from transformers import ResNetModel

        torch.manual_seed(seed)
        identity = "random-" + hashlib.sha256(f"{seed}\n{config.to_json_string()}".encode()).hexdigest()[:16]
        return cls(ResNetModel(config), identity, batch_size, threads)

    @staticmethod
    def pixels(png: bytes) -> np.ndarray:
        img = Image.open(io.BytesIO(png)).convert("RGB").resize((224, 224), Image.Resampling.BILINEAR)
        arr = (np.asarray(img, dtype=np.float32) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD
        return arr.transpose(2, 0, 1)

    def embed(self, images: list[bytes]) -> np.ndarray:
        import torch

        out = []
        with torch.inference_mode():
            for start in range(0, len(images), self.batch_size):
                batch = np.stack([self.pixels(png) for png in images[start : start + self.batch_size]])
                pooled = self.model(pixel_values=torch.from_numpy(batch)).pooler_output
                out.append(pooled.reshape(len(batch), -1).numpy())
        return _normalise(np.concatenate(out) if out else np.zeros((0, self.dim), dtype=np.float32))


def make_featurizer(settings: CurationSettings) -> Featurizer:
    if settings.featurizer == "thumb":
        return ThumbFeaturizer()
    if settings.featurizer == "phash":
        return PHashFeaturizer()
    if not settings.resnet_weights:
        raise ConfigError(
            "curate.featurizer = resnet needs curate.resnet_weights (a local checkpoint directory); "
            "set it, or use featurizer thumb or phash, which need no weights"
        )
    return ResNetFeaturizer.load(settings.resnet_weights, settings.batch_size, settings.threads)


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
        featurizer: Featurizer,
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
