"""Transient overlays: frames a trajectory shows only while a dialog covers the screen.

A pop-up that is dismissed without changing the screen ("Allow notifications?", a rating
prompt) is not part of the route: two recordings of one route differ by where such dialogs
appeared. Left in, its frames pull a trajectory's mean embedding away from its twin's
(AgentCPM-GUI §3.4 averages every frame), so dedup misses the pair.

A frame is an overlay of a later frame when it shows that frame dimmed by one uniform scrim
everywhere except a compact region (the dialog). Android's dialogs and bottom sheets and a
web page's modal backdrop all draw a scrim this way. The test needs only pixels, from grey
thumbnails (`GreyThumbs`), so it runs on any backend and on a user's own pairs. A dialog
the trajectory acts in and leaves to another screen is kept: its next frame is not the
same screen beneath it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from trajforge.features import grey

K = TypeVar("K", bound=Hashable)

THUMB = (36, 72)  # portrait, like a phone; the dialog's box is coarse
LOOKAHEAD = 3  # how many frames ahead the dismissed screen may appear (a repeated tap in between)
_LIT = 0.2  # pixels darker than this in the later frame carry no ratio
_MATCH = 0.06  # a pixel is scrimmed when its ratio is within this of the median ratio
_COVER = 0.5  # ...and at least this share of lit pixels must be scrimmed


class GreyThumbs:
    """Grey 36x72 thumbnails as vectors (intensities in [0, 1], NOT normalised), cached by
    screenshot hash in the feature table like any featuriser's vectors."""

    key, dim = f"grey:{THUMB[0]}x{THUMB[1]}:1", THUMB[0] * THUMB[1]

    def embed(self, images: list[bytes]) -> np.ndarray:
        rows = [thumb(png).ravel() for png in images]
        return np.stack(rows) if rows else np.zeros((0, self.dim), dtype=np.float32)


def thumb(png: bytes) -> np.ndarray:
    return grey(png, THUMB)


def overlay_of(front: np.ndarray, back: np.ndarray) -> bool:
    """True when `front` is `back` under a scrim: one darkening ratio over most of the screen."""
    lit = back > _LIT
    if lit.mean() < 0.2:  # a dark screen: no ratio to read
        return False
    ratio = front[lit] / back[lit]
    median = float(np.median(ratio))
    if not 0.1 < median < 0.92:  # not darkened (the same screen), or blacked out
        return False
    return float(np.mean(np.abs(ratio - median) < _MATCH)) > _COVER


def settled(frames: Sequence[K], thumbs: Mapping[K, np.ndarray]) -> list[K]:
    """`frames` without the overlays: each frame is compared with the next frame that differs
    from it (within `LOOKAHEAD`). Never empty: a trajectory of overlays only is kept whole."""
    kept = []
    for i, frame in enumerate(frames):
        later = next((f for f in frames[i + 1 : i + 1 + LOOKAHEAD] if f != frame), None)
        if later is None or not overlay_of(thumbs[frame], thumbs[later]):
            kept.append(frame)
    return kept or list(frames)
