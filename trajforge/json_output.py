"""JSON answers as real endpoints write them: wrapped in reasoning, fences or prose."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)\s*```", re.S)
_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
_THINK_END = re.compile(r"</(?:think|thinking|reasoning)>", re.I)
_DECODER = json.JSONDecoder()


def parse_json_output(text: str) -> tuple[Any, str | None]:
    """(data, None) or (None, reason): malformed output is data, not an exception.

    Real endpoints wrap the JSON: a reasoning block first (`<think>…</think>`, or only the closing
    tag when the template opened it), a fenced block, prose before or after. The answer is the
    whole remaining text when it is JSON, else the last fenced block that is, else the last JSON
    object or array in the text. With none, the reason is the whole text's decode error.
    """
    body = _THINK_BLOCK.sub("", text)
    ends = list(_THINK_END.finditer(body))
    if ends:  # a reasoning block the chat template opened: the answer follows its end
        body = body[ends[-1].end() :]
    body = body.strip()
    if not body:
        return None, "empty_output"
    try:
        return json.loads(body), None
    except json.JSONDecodeError as exc:
        whole_error = f"invalid_json: {exc.msg} at char {exc.pos}"
    for block in reversed(_FENCE.findall(body)):
        try:
            return json.loads(block), None
        except json.JSONDecodeError:
            continue
    found = _last_json_value(body)
    return (found, None) if found is not None else (None, whole_error)


def _last_json_value(body: str) -> Any:
    """The last object or array embedded in prose (nested ones are part of their parent)."""
    last, pos = None, 0
    while True:
        starts = [i for i in (body.find("{", pos), body.find("[", pos)) if i >= 0]
        if not starts:
            return last
        start = min(starts)
        try:
            value, end = _DECODER.raw_decode(body, start)
        except json.JSONDecodeError:
            pos = start + 1
            continue
        if isinstance(value, dict | list):
            last = value
        pos = end


def numbered(data: Any, key: str = "steps") -> dict[str, dict[str, Any]]:
    """A reply's per-step entries (`{"steps": [{"step": 1, ...}, ...]}`) by their step number as a
    string; what is not such a list, or not an object, is left out."""
    entries = data.get(key) if isinstance(data, dict) else None
    items = entries if isinstance(entries, list) else []
    return {str(e.get("step")): e for e in items if isinstance(e, dict)}
