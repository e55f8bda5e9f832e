"""Pixels for the simulated device: Pillow drawing at phone resolution, cached by state.

Rendering is deterministic: the same `render_key()` gives the same PNG bytes, so frames
dedupe by sha256 in the object store, and a frame is encoded once per distinct state.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import threading
from collections import OrderedDict
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from trajforge.appspec import AppSpec
from trajforge.errors import ConfigError
from trajforge.world.device import SimDevice
from trajforge.world.model import Element

# CJK-capable fonts first: WenQuanYi Micro Hei as the Python dependency `paperang-p2-fonts-cjk`
# ships it (byte for byte Debian's fonts-wqy-microhei 0.2.0-beta, so screens render the same with
# or without the system package, and a fresh machine needs no apt-get); then Debian's own CJK fonts;
# then DejaVu; then Pillow's bundled font, which draws CJK as boxes but keeps rendering deterministic.
PACKAGED_CJK_FONT = ("paperang_p2_fonts_cjk", "fonts/wqy-microhei.ttc")
CJK_FONTS = (
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
)
FALLBACK_FONTS = ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",)
Font = ImageFont.FreeTypeFont | ImageFont.ImageFont
_CJK = re.compile(r"[\u3000-\u30ff\u3400-\u9fff\uac00-\ud7af\uff00-\uffef]")


def packaged_cjk_font() -> str | None:
    """The CJK font installed with trajforge's Python dependencies, or None if it is missing."""
    package, resource = PACKAGED_CJK_FONT
    try:
        path = Path(str(files(package) / resource))
    except ModuleNotFoundError:
        return None
    return str(path) if path.is_file() else None


def cjk_font_path() -> str | None:
    return packaged_cjk_font() or next((p for p in CJK_FONTS if Path(p).is_file()), None)


def font_path() -> str | None:
    return cjk_font_path() or next((p for p in FALLBACK_FONTS if Path(p).is_file()), None)


def require_fonts(apps: list[AppSpec]) -> None:
    """Refuse to render apps with CJK text when no CJK font is installed: their screens would
    be boxes that neither a critic nor an annotator could read.

    Raises:
        ConfigError: names the apps and the package to install.
    """
    if cjk_font_path() is not None:
        return
    needing = [a.name for a in apps if _CJK.search(json.dumps(a.model_dump(mode="json"), ensure_ascii=False))]
    if needing:
        raise ConfigError(
            f"apps {', '.join(needing)} show CJK text but no CJK font is installed, so their screens "
            "would render as boxes; reinstall trajforge's dependencies (pip install -e .), which bring one, "
            "or apt-get install fonts-wqy-microhei, or leave those apps out"
        )


@cache
def _font(size: int) -> Font:
    path = font_path()
    return ImageFont.truetype(path, size) if path else ImageFont.load_default(size=size)


class FrameRenderer:
    """Draws a device's current state; keeps the last `cache_size` encoded frames.

    Args:
        cache_size: distinct states whose PNG is kept; 0 disables the cache (for benchmarks).
    """

    def __init__(self, cache_size: int = 512) -> None:
        self.cache_size = cache_size
        self._frames: OrderedDict[tuple[Any, ...], tuple[bytes, str]] = OrderedDict()
        self._lock = threading.Lock()  # rollout workers share one renderer across threads
        self.hits = self.misses = 0

    def frame(self, device: SimDevice) -> tuple[bytes, str]:
        """(PNG bytes, sha256) of what the device shows now."""
        key = device.render_key()
        with self._lock:
            cached = self._frames.get(key) if self.cache_size else None
            if cached is not None:
                self._frames.move_to_end(key)
                self.hits += 1
                return cached
            self.misses += 1
        png = encode(draw(device))  # outside the lock: two threads may draw one state, harmlessly
        entry = (png, hashlib.sha256(png).hexdigest())
        if self.cache_size:
            with self._lock:
                self._frames[key] = entry
                if len(self._frames) > self.cache_size:
                    self._frames.popitem(last=False)
        return entry


def encode(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=3)  # no timestamps: same image, same bytes
    return buf.getvalue()


def draw(device: SimDevice) -> Image.Image:
    w, h = device.size.width, device.size.height
    k = device.scale
    img = Image.new("RGB", (w, h), "#ffffff")
    d = ImageDraw.Draw(img)
    px = lambda v: round(v * k)  # noqa: E731
    state = device.state
    if state.loading:
        d.text((w // 2 - px(120), h // 2), "Loading…", fill="#555", font=_font(px(56)))
    elif device.app is None:
        _launcher(d, device.elements(), px)
    else:
        top, bottom = device.viewport
        for e in device.layout():
            if e.bounds[3] > top and e.bounds[1] < bottom:
                _element(d, e, px)
        d.rectangle((0, bottom, w, h), fill="#ffffff")  # rows scrolled under the nav bar are cut
        # the app bar after the rows: rows scrolled above the viewport slide under it, as on a phone
        d.rectangle((0, px(90), w, top), fill="#f3f3f7")
        d.text((px(40), px(140)), "←", fill="#222", font=_font(px(56)))
        d.text((px(130), px(138)), device.render_key()[4], fill="#111", font=_font(px(56)))
        d.rectangle((0, top - px(1), w, top), fill="#dddddd")
    # status bar: fixed clock and battery, so frames do not change with the wall clock
    d.rectangle((0, 0, w, px(90)), fill="#1f1f1f")
    d.text((px(36), px(22)), "12:00", fill="white", font=_font(px(40)))
    d.rectangle((w - px(130), px(30), w - px(50), px(62)), outline="white", width=px(3))
    d.rectangle((w - px(126), px(34), w - px(70), px(58)), fill="white")
    d.rectangle((0, h - px(140), w, h), fill="#000000")
    for i, glyph in enumerate(("◁", "○", "□")):
        d.text((w * (i + 1) // 4 - px(20), h - px(100)), glyph, fill="white", font=_font(px(56)))
    if state.popup:  # a dialog dims the screen beneath it with a scrim, as Android's do
        scrim = Image.new("RGBA", img.size, (0, 0, 0, 150))
        img = Image.alpha_composite(img.convert("RGBA"), scrim).convert("RGB")
        _popup(ImageDraw.Draw(img), device, px)
    return img


def _launcher(d: ImageDraw.ImageDraw, icons: list[Element], px: Any) -> None:
    palette = ("#e8453c", "#3c78e8", "#35a853", "#f5a623", "#8e44ad", "#16a085")
    for i, e in enumerate(icons):
        x1, y1, x2, _ = e.bounds
        d.rounded_rectangle((x1 + px(30), y1, x2 - px(30), y1 + px(160)), radius=px(36), fill=palette[i % 6])
        d.text((x1 + px(70), y1 + px(40)), e.text[:1], fill="white", font=_font(px(72)))
        d.text((x1 + px(10), y1 + px(180)), e.text, fill="#222", font=_font(px(36)))


def _element(d: ImageDraw.ImageDraw, e: Element, px: Any) -> None:
    x1, y1, x2, y2 = e.bounds
    text_y = (y1 + y2) // 2 - px(24)
    if e.kind == "button":
        d.rounded_rectangle(e.bounds, radius=px(24), fill="#1a73e8")
        d.text((x1 + px(40), text_y), e.text, fill="white", font=_font(px(46)))
    elif e.kind == "input":
        d.rounded_rectangle(e.bounds, radius=px(20), outline="#1a73e8" if e.focused else "#999", width=px(4))
        d.text((x1 + px(36), text_y), e.text, fill="#111" if e.focused else "#777", font=_font(px(44)))
        if e.focused:
            d.line((x2 - px(60), y1 + px(30), x2 - px(60), y2 - px(30)), fill="#1a73e8", width=px(4))
    elif e.kind == "toggle":
        d.text((x1 + px(20), text_y), e.text, fill="#111", font=_font(px(46)))
        on = bool(e.checked)
        track = (x2 - px(170), y1 + px(45), x2 - px(40), y2 - px(45))
        d.rounded_rectangle(track, radius=px(30), fill="#1a73e8" if on else "#bbbbbb")
        knob_x = track[2] - px(58) if on else track[0] + px(4)
        d.ellipse((knob_x, track[1] + px(4), knob_x + px(54), track[3] - px(4)), fill="white")
    elif e.kind == "list_item":
        d.rectangle(e.bounds, outline="#e0e0e0", width=px(2))
        d.text((x1 + px(40), text_y), e.text, fill="#111", font=_font(px(46)))
        if e.checked is not None:
            cx, cy = x2 - px(80), (y1 + y2) // 2
            d.ellipse((cx - px(26), cy - px(26), cx + px(26), cy + px(26)), outline="#1a73e8", width=px(5))
            if e.checked:
                d.ellipse((cx - px(13), cy - px(13), cx + px(13), cy + px(13)), fill="#1a73e8")
        else:
            d.text((x2 - px(70), text_y), "›", fill="#999", font=_font(px(52)))
    else:  # text
        d.text((x1 + px(20), text_y), e.text, fill="#333", font=_font(px(42)))


def _popup(d: ImageDraw.ImageDraw, device: SimDevice, px: Any) -> None:
    w, h = device.size.width, device.size.height
    box = (px(90), h // 2 - px(300), w - px(90), h // 2 + px(260))
    d.rounded_rectangle(box, radius=px(30), fill="#ffffff", outline="#444", width=px(4))
    d.text((box[0] + px(60), box[1] + px(80)), "Allow notifications?", fill="#111", font=_font(px(52)))
    close = device.elements()[0]
    d.rounded_rectangle(close.bounds, radius=px(24), fill="#1a73e8")
    d.text(
        (close.bounds[0] + px(120), close.bounds[1] + px(40)), close.text, fill="white", font=_font(px(48))
    )
