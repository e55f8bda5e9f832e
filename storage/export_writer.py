"""Where an export's files go: each screenshot written once, at the size its trainer feeds."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image

from storage.keys import blob_key
from storage.objectstore import ObjectStore


class Writer:
    """Files of one export under a local root; images written once each, optionally downscaled.

    `final` is where the root will end up (absolute paths name it); None writes relative paths.
    `fit` gives the size an image of (width, height) is written at (`written_size` for the
    format and the trainer), after the `max_side` downscale.
    """

    def __init__(
        self,
        root: Path,
        store: ObjectStore,
        max_side: int | None,
        final: Path | None,
        fit: Callable[[int, int], tuple[int, int]],
    ) -> None:
        self.root, self.store, self.max_side, self.final, self.fit = root, store, max_side, final, fit
        self.images: set[str] = set()  # written as files
        self.embedded: set[str] = set()  # written into rows as bytes
        self.sizes: dict[str, tuple[int, int]] = {}  # exported (width, height) by sha

    def image(self, sha: str) -> str:
        rel = f"images/{sha[:2]}/{sha}.png"
        if sha not in self.images:
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.image_bytes(sha))
            self.images.add(sha)
        return str(self.final / rel) if self.final is not None else rel

    def embed(self, sha: str) -> dict[str, Any]:
        self.embedded.add(sha)
        return {"bytes": self.image_bytes(sha), "path": f"{sha}.png"}

    def size_for(self, width: int, height: int) -> tuple[int, int]:
        """The size a screenshot of width x height is exported at: within `max_side`, then `fit`."""
        if self.max_side is not None and max(width, height) > self.max_side:
            scale = self.max_side / max(width, height)
            width, height = max(1, round(width * scale)), max(1, round(height * scale))
        return self.fit(width, height)

    def image_bytes(self, sha: str) -> bytes:
        data = self.store.get(blob_key(sha))
        img: Image.Image = Image.open(io.BytesIO(data))
        stored = img.size
        size = self.size_for(*img.size)
        if size != img.size:
            img = img.resize(size, Image.Resampling.BICUBIC)
        self.sizes[sha] = img.size
        if img.size == stored:
            return data
        buf = io.BytesIO()
        img.save(buf, format="PNG", compress_level=1)  # screenshots: fast beats 10% smaller
        return buf.getvalue()
