"""GUI augmentations for the screen encoder: two views of one screenshot differ by what changes
between two recordings of the same trajectory.

On a phone (`PHONE`): a pop-up under its scrim, a scroll offset, list rows replaced, another
status bar, small shifts, scale and colour changes. A page (a browser's viewport, a MiniWoB++
task, a desktop window: `PAGE`) has no status bar, so its views never get one. The kind is
read off the screenshots themselves (`screen_kind`): portrait phone screens are at least 1.6
times as tall as wide.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance

PHONE_ASPECT = 1.6  # height / width at or above which a screenshot is a phone's


def _bands(h: int) -> tuple[int, int]:
    """The content region: below the status and app bars, above the nav bar."""
    return int(h * 0.11), int(h * 0.94)


def scroll(img: Image.Image, rng: random.Random) -> Image.Image:
    h = img.size[1]
    top, bottom = _bands(h)
    region = np.asarray(img)[top:bottom]
    dy = int(rng.uniform(-0.45, 0.45) * len(region))
    out = np.asarray(img).copy()
    out[top:bottom] = np.roll(region, dy, axis=0)
    return Image.fromarray(out)


def relist(img: Image.Image, rng: random.Random) -> Image.Image:
    """Some rows of the content replaced by other rows of the same screen."""
    h = img.size[1]
    top, bottom = _bands(h)
    arr = np.asarray(img).copy()
    row = max(4, int(h * rng.uniform(0.04, 0.07)))
    for _ in range(rng.randint(1, 4)):
        if bottom - top <= 2 * row:
            break
        src, dst = (rng.randrange(top, bottom - row) for _ in range(2))
        arr[dst : dst + row] = arr[src : src + row]
    return Image.fromarray(arr)


def popup(img: Image.Image, rng: random.Random) -> Image.Image:
    w, h = img.size
    dimmed = Image.alpha_composite(
        img.convert("RGBA"), Image.new("RGBA", img.size, (0, 0, 0, rng.randint(90, 170)))
    ).convert("RGB")
    d = ImageDraw.Draw(dimmed)
    bw, bh = w * rng.uniform(0.6, 0.9), h * rng.uniform(0.15, 0.35)
    x0, y0 = (w - bw) / 2 + rng.uniform(-0.03, 0.03) * w, (h - bh) / 2 + rng.uniform(-0.1, 0.1) * h
    d.rounded_rectangle((x0, y0, x0 + bw, y0 + bh), radius=w * 0.03, fill="#ffffff")
    for i in range(rng.randint(1, 3)):  # lines of text
        y = y0 + bh * (0.15 + 0.15 * i)
        d.rectangle((x0 + bw * 0.08, y, x0 + bw * rng.uniform(0.3, 0.85), y + h * 0.012), fill="#222222")
    bx = x0 + bw * rng.uniform(0.3, 0.5)
    d.rounded_rectangle((bx, y0 + bh * 0.7, bx + bw * 0.3, y0 + bh * 0.88), radius=w * 0.02, fill="#1a73e8")
    return dimmed


def status_bar(img: Image.Image, rng: random.Random) -> Image.Image:
    w, h = img.size
    out = img.copy()
    d = ImageDraw.Draw(out)
    bar = int(h * 0.035)
    colour = img.getpixel((1, 1))
    d.rectangle((0, 0, w, bar), fill=colour)
    ink = (255, 255, 255) if sum(colour[:3]) < 384 else (0, 0, 0)  # type: ignore[index]
    for _ in range(rng.randint(1, 5)):  # clock digits and icons
        x = rng.uniform(0, w * 0.95)
        d.rectangle((x, bar * 0.3, x + rng.uniform(2, w * 0.06), bar * 0.7), fill=ink)
    return out


def jitter(img: Image.Image, rng: random.Random) -> Image.Image:
    w, h = img.size
    s = rng.uniform(0.92, 1.0)
    cw, ch = int(w * s), int(h * s)
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    out = img.crop((x, y, x + cw, y + ch)).resize((w, h), Image.Resampling.BILINEAR)
    out = ImageEnhance.Brightness(out).enhance(rng.uniform(0.85, 1.15))
    return ImageEnhance.Contrast(out).enhance(rng.uniform(0.85, 1.15))


PHONE = ((popup, 0.5), (scroll, 0.5), (relist, 0.3), (status_bar, 0.5), (jitter, 0.8))
PAGE = ((popup, 0.5), (scroll, 0.5), (relist, 0.3), (jitter, 0.8))
AUGMENTATIONS = {"phone": PHONE, "page": PAGE}


def screen_kind(images: Sequence[Image.Image]) -> str:
    """ "phone" when the screenshots' median height / width is at least `PHONE_ASPECT`, else "page"."""
    aspect = statistics.median(img.size[1] / max(1, img.size[0]) for img in images)
    return "phone" if aspect >= PHONE_ASPECT else "page"


def augment(img: Image.Image, rng: random.Random, kind: str = "phone") -> Image.Image:
    for op, p in AUGMENTATIONS[kind]:
        if rng.random() < p:
            img = op(img, rng)
    return img


def bar_augment(img: Image.Image, rng: random.Random) -> Image.Image:
    """An app bar as another recording shows it: under a dialog's scrim, shifted, recoloured."""
    if rng.random() < 0.5:
        dim = rng.uniform(0.35, 0.8)
        img = img.point(lambda v: int(v * dim))
    return jitter(img, rng) if rng.random() < 0.8 else img
