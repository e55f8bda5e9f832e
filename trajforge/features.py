"""Screenshot features: the featurisers curation's dedup and the knn policy share.

AgentCPM-GUI §3.4 embeds each screenshot with ResNet-50 and averages a trajectory's
screenshots. `ResNetFeaturizer` does that with transformers' `ResNetModel` (batched
inference), from a local checkpoint: an ImageNet ResNet-50, or the screen encoder the engine
trained on its own screenshots (`curation.encoder`; it sees each screen whole and its app bar,
see `AppBar`). The weights-free ones are a DCT perceptual hash (`phash`) and a grey thumbnail
(`thumb`). Every vector is float32 and L2-normalised, so an inner product is a cosine.

Which one a run uses, and the cache of computed vectors, are `storage.features`'.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from PIL import Image

from trajforge.errors import ConfigError

SIDECAR = "trajforge_encoder.json"  # a trained encoder's input size and training facts, next to config.json
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


class Vectoriser(Protocol):
    key: str  # names the model and its configuration; the cache namespace
    dim: int

    def embed(self, images: list[bytes]) -> np.ndarray:
        """(len(images), dim) float32."""
        ...


class Featurizer(Vectoriser, Protocol):
    """Rows L2-normalised; `threshold` is the trajectory cosine above which dedup calls a
    duplicate when `curate.dedup_threshold` is not set."""

    threshold: float


def _normalise(rows: np.ndarray) -> np.ndarray:
    rows = rows.astype(np.float32, copy=False)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    flat = norms[:, 0] < 1e-8  # a blank screen has no contrast: give it one fixed direction
    rows[flat] = 1.0
    norms[flat] = np.sqrt(rows.shape[1])
    return rows / norms


def grey(png: bytes, size: tuple[int, int]) -> np.ndarray:
    img = Image.open(io.BytesIO(png)).convert("L").resize(size, Image.Resampling.BOX)
    return np.asarray(img, dtype=np.float32) / 255.0


class ThumbFeaturizer:
    """A 16x32 grey thumbnail (portrait, like a phone), centred: robust to small shifts."""

    key, dim, threshold = "thumb:16x32:1", 16 * 32, 0.97

    def embed(self, images: list[bytes]) -> np.ndarray:
        rows = np.stack([grey(png, (16, 32)).ravel() for png in images]) if images else np.zeros((0, 512))
        return _normalise(rows - rows.mean(axis=1, keepdims=True))


def _dct_matrix(n: int) -> np.ndarray:
    k = np.arange(n)[:, None]
    m = np.cos(np.pi * (2 * np.arange(n)[None, :] + 1) * k / (2 * n)) * np.sqrt(2 / n)
    m[0] /= np.sqrt(2)
    return m.astype(np.float32)


class PHashFeaturizer:
    """The classic 64-bit DCT perceptual hash as a ±1 vector: cosine = 1 - 2·hamming/64."""

    key, dim, threshold = "phash:64:1", 64, 0.97
    _dct = _dct_matrix(32)

    def embed(self, images: list[bytes]) -> np.ndarray:
        rows = []
        for png in images:
            low = (self._dct @ grey(png, (32, 32)) @ self._dct.T)[:8, :8].ravel()
            rows.append(np.where(low > np.median(low[1:]), 1.0, -1.0))
        return _normalise(np.array(rows, dtype=np.float32).reshape(len(images), 64))


@dataclass(frozen=True)
class AppBar:
    """A trained encoder's second view of each screen: the app bar (the band below the status bar,
    where a screen's title is), at a resolution where the title is legible. Screen and bar
    features are each centred on their training mean and normalised, then joined with the bar
    weighted by `weight`, so two screens that differ only in their title do not look alike."""

    top: float  # the band, as fractions of the screen's height
    bottom: float
    width: int  # the band's input pixels
    height: int
    weight: float
    centre_screen: tuple[float, ...]
    centre_bar: tuple[float, ...]
    cells: int = 1  # the band's feature map pooled into this many cells left to right: a title's word order

    @classmethod
    def from_json(cls, facts: dict[str, Any]) -> AppBar:
        top, bottom, weight = (float(facts[k]) for k in ("top", "bottom", "weight"))
        screen, bar = (tuple(float(x) for x in facts[k]) for k in ("centre_screen", "centre_bar"))
        size = int(facts["width"]), int(facts["height"])
        return cls(top, bottom, *size, weight, screen, bar, int(facts.get("cells", 1)))

    @property
    def grid(self) -> tuple[int, int]:
        """The band's pooling grid, for training and inference alike: one row of `cells`."""
        return (1, self.cells)

    def crop(self, img: Image.Image) -> Image.Image:
        w, h = img.size
        return img.crop((0, int(h * self.top), w, max(int(h * self.top) + 1, int(h * self.bottom))))


def standardised(img: Image.Image, size: tuple[int, int]) -> np.ndarray:
    """(3, height, width) float32, zero mean and unit variance per image: a scrim that dims the
    whole input (a dialog's, under its box) scales every pixel alike and is divided out."""
    arr = np.asarray(img.convert("RGB").resize(size, Image.Resampling.BOX), dtype=np.float32) / 255.0
    return ((arr - arr.mean()) / (arr.std() + 1e-3)).transpose(2, 0, 1)


def screen_and_bar(
    model: Any,
    device: str,
    opened: list[Image.Image],
    size: tuple[int, int],
    bar: AppBar,
    batch: int,
    rows: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Uncentred pooled features of each screen (standardised at `size`) and of its app bar."""
    screens = [standardised(img, size) for img in opened]
    bars = [standardised(bar.crop(img), (bar.width, bar.height)) for img in opened]
    return (
        pool_batches(model, device, screens, batch, (rows, 1)),
        pool_batches(model, device, bars, batch, bar.grid),
    )


def pooled(model: Any, pixels: Any, grid: tuple[int, int]) -> Any:
    """The feature map average-pooled into a (rows, columns) grid, flattened: (batch, cells * channels)."""
    import torch.nn.functional as F

    return F.adaptive_avg_pool2d(model(pixel_values=pixels).last_hidden_state, grid).flatten(1)


def pool_batches(
    model: Any, device: str, arrays: list[np.ndarray], batch_size: int, grid: tuple[int, int]
) -> np.ndarray:
    """`pooled` features of each input, in batches: (len(arrays), cells * channels)."""
    import torch

    out = []
    with torch.inference_mode():
        for start in range(0, len(arrays), batch_size):
            batch = torch.from_numpy(np.stack(arrays[start : start + batch_size])).to(device)
            out.append(pooled(model, batch, grid).cpu().numpy())
    return np.concatenate(out)


class ResNetFeaturizer:
    """Pooled ResNet features. An ImageNet checkpoint sees the whole screen squashed to 224x224
    with ImageNet normalisation, its feature map averaged; a trained screen encoder sees its own
    input size and averages its map into horizontal bands, and one trained with an `AppBar` sees
    the standardised screen and app bar too (all in its sidecar)."""

    def __init__(
        self,
        model: Any,
        identity: str,
        batch_size: int = 32,
        threads: int = 0,
        size: tuple[int, int] = (224, 224),
        imagenet: bool = True,
        rows: int = 1,
        bar: AppBar | None = None,
        threshold: float = 0.97,
    ) -> None:
        import torch

        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = model.eval().to(self.device)
        self.batch_size = batch_size
        self.size, self.imagenet, self.rows, self.bar = size, imagenet, rows, bar
        self.dim = int(model.config.hidden_sizes[-1]) * (rows + (bar.cells if bar else 0))
        self.key = f"resnet:{identity}"[:128]
        self.threshold = threshold
        if threads:
            torch.set_num_threads(threads)

    @classmethod
    def load(cls, weights: str, batch_size: int = 32, threads: int = 0) -> ResNetFeaturizer:
        """From a local checkpoint directory or hub id (hub ids need a reachable hub)."""
        from transformers import ResNetModel
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a bar per shard load floods the round's output
        try:
            model = ResNetModel.from_pretrained(weights)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"curate.resnet_weights = {weights!r}: cannot load a ResNet checkpoint ({exc}); give a "
                "local directory with config.json and the weights, or set curate.featurizer to phash"
            ) from exc
        sidecar = Path(weights, SIDECAR)
        trained = json.loads(sidecar.read_text()) if sidecar.is_file() else None
        identity = hashlib.sha256(f"{weights}\n{model.config.to_json_string()}".encode()).hexdigest()[:16]
        if trained is None:
            return cls(model, identity, batch_size, threads)
        size = (int(trained["width"]), int(trained["height"]))
        bar = trained.get("bar")
        return cls(
            model,
            identity,
            batch_size,
            threads,
            size,
            imagenet=False,
            rows=int(trained.get("rows", 1)),
            bar=AppBar.from_json(bar) if bar else None,
            threshold=float(trained.get("threshold", 0.97)),
        )

    @classmethod
    def random(cls, config: Any, seed: int = 0, batch_size: int = 32, threads: int = 0) -> ResNetFeaturizer:
        """A randomly initialised model (tests and benchmarks: no weights on this machine)."""
        import torch
        from transformers import ResNetModel

        torch.manual_seed(seed)
        identity = "random-" + hashlib.sha256(f"{seed}\n{config.to_json_string()}".encode()).hexdigest()[:16]
        return cls(ResNetModel(config), identity, batch_size, threads)

    def pixels(self, png: bytes) -> np.ndarray:
        resample = Image.Resampling.BILINEAR if self.imagenet else Image.Resampling.BOX  # as trained
        img = Image.open(io.BytesIO(png)).convert("RGB").resize(self.size, resample)
        arr = np.asarray(img, dtype=np.float32) / 255.0
        arr = (arr - IMAGENET_MEAN) / IMAGENET_STD if self.imagenet else arr * 2.0 - 1.0
        return arr.transpose(2, 0, 1)

    def embed(self, images: list[bytes]) -> np.ndarray:
        if not images:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.bar is None:
            pixels = [self.pixels(png) for png in images]
            return _normalise(pool_batches(self.model, self.device, pixels, self.batch_size, (self.rows, 1)))
        bar = self.bar
        opened = [Image.open(io.BytesIO(png)).convert("RGB") for png in images]
        screen, band = screen_and_bar(
            self.model, self.device, opened, self.size, bar, self.batch_size, self.rows
        )
        screen = _normalise(screen - np.asarray(bar.centre_screen, dtype=np.float32))
        band = _normalise(band - np.asarray(bar.centre_bar, dtype=np.float32))
        return _normalise(np.concatenate([screen, bar.weight * band], axis=1))
