"""Chat messages as OpenAI-compatible servers take them: what the gateway sends and the families build."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

Message = dict[str, Any]
ImagePart = Callable[[str], dict[str, Any]]  # a screenshot's sha -> its chat content part


def image_part(png: bytes, mime: str = "image/png") -> dict[str, Any]:
    """A chat content part carrying an image as a data URL."""
    url = f"data:{mime};base64,{base64.b64encode(png).decode('ascii')}"
    return {"type": "image_url", "image_url": {"url": url}}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}
