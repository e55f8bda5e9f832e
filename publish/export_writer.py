"""Where an export's files go: each screenshot written once, as stored where its trainer resizes it
as the coordinates assume, else at the size its trainer feeds.

Rows that embed their images (rl-verl, hf) name the same screenshot many times (every category of
a step, every step that shows it): its resized, encoded bytes are kept in a bounded LRU
(`CACHE_BYTES`), so each distinct image is decoded, resized and encoded about once per export.
"""

from __future__ import annotations

import io
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image

from storage.keys import blob_key
from storage.objectstore import ObjectStore

CACHE_BYTES = 256 * 1024 * 1024  # encoded images an export keeps in memory (about 1,000 screenshots)


class Writer:
    """Files of one export under a local root; images written once each, optionally downscaled.

    Image paths are relative to the export folder, so the folder can be moved: LLaMA-Factory resolves
    them against `media_dir` (its `dataset_dir` by default), ms-swift against `ROOT_IMAGE_DIR`.
    `fit` gives the sizes an image of (width, height) is written at and fed to the trainer's processor
    at (`export_sizes` for the format and the trainer), after the `max_side` downscale.
    """

    def __init__(
        self,
        root: Path,
        store: ObjectStore,
        max_side: int | None,
        fit: Callable[[int, int], tuple[tuple[int, int], tuple[int, int]]],
    ) -> None:
        self.root, self.store, self.max_side, self.fit = root, store, max_side, fit
        self.images: set[str] = set()  # written as files
        self.embedded: set[str] = set()  # written into rows as bytes
        self.sizes: dict[str, tuple[int, int]] = {}  # the size the trainer's processor gets, by sha
        self.encodes = 0  # images decoded, resized and encoded (a cache miss each)
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cached = 0
        self.cache_bytes = CACHE_BYTES

    def image(self, sha: str) -> str:
        rel = f"images/{sha[:2]}/{sha}.png"
        if sha not in self.images:
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.image_bytes(sha))
            self.images.add(sha)
        return rel

    def embed(self, sha: str) -> dict[str, Any]:
        self.embedded.add(sha)
        return {"bytes": self.image_bytes(sha), "path": f"{sha}.png"}

    def size_for(self, width: int, height: int) -> tuple[int, int]:
        """The size the trainer's processor is handed a screenshot of width x height at (the size its
        coordinates are computed for): within `max_side`, then `fit`."""
        return self._sizes(width, height)[1]

    def _sizes(self, width: int, height: int) -> tuple[tuple[int, int], tuple[int, int]]:
        if self.max_side is not None and max(width, height) > self.max_side:
            scale = self.max_side / max(width, height)
            width, height = max(1, round(width * scale)), max(1, round(height * scale))
        return self.fit(width, height)

    def image_bytes(self, sha: str) -> bytes:
        """The screenshot as exported (resized to `size_for`), from the LRU when it holds it."""
        hit = self._cache.get(sha)
        if hit is not None:
            self._cache.move_to_end(sha)
            return hit
        data = self._encode(sha)
        if len(data) <= self.cache_bytes:
            self._cache[sha] = data
            self._cached += len(data)
            while self._cached > self.cache_bytes:
                self._cached -= len(self._cache.popitem(last=False)[1])
        return data

    def _encode(self, sha: str) -> bytes:
        self.encodes += 1
        data = self.store.get(blob_key(sha))
        img: Image.Image = Image.open(io.BytesIO(data))
        stored = img.size
        size, self.sizes[sha] = self._sizes(*img.size)
        if size != img.size:
            img = img.resize(size, Image.Resampling.BICUBIC)
        if img.size == stored:
            return data
        buf = io.BytesIO()
        img.save(buf, format="PNG", compress_level=1)  # screenshots: fast beats 10% smaller
        return buf.getvalue()
