"""Words of a task and of a screen, as the knn policy and the learned critic both read them."""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_QUOTED = re.compile(r"[\"“]([^\"”]{1,60})[\"”]")


def cjk(text: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in text)


def words(text: str) -> list[str]:
    """Lower-cased word tokens; CJK text becomes one token per character."""
    out: list[str] = []
    for w in _WORD.findall(text.casefold()):
        out.extend(list(w) if cjk(w) else [w])
    return out


def quoted(instruction: str) -> list[str]:
    """The values a task quotes ('Enter "Myron" into the text field'): what it wants typed or picked."""
    return _QUOTED.findall(instruction)
