"""An annotation's result as trajforge reads it: the verdict, step labels and corrections
(`parse_result`), corrected actions parsed with every known codec, and what of it the annotator
decided rather than accepted from the critics' pre-fill (`independence`)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from annotation import config as cfg
from trajforge.actions import CODECS, Screen
from trajforge.errors import ActionError

_STEP_FIELD = re.compile(
    r"^(step_label|corrected_action|corrected_thought|corrected_instruction|correct_point)_(\d+)$"
)
# Tried in order on a corrected action; canonical JSON first, then the model formats.
CORRECTION_CODECS = ("canonical", "qwen", "mobiler1", "uitars", "agentcpm", "androidworld")


@dataclass
class Parsed:
    verdict: str | None = None
    step_labels: dict[str, str] = field(default_factory=dict)
    actions: dict[int, str] = field(default_factory=dict)
    thoughts: dict[int, str] = field(default_factory=dict)
    instructions: dict[int, str] = field(default_factory=dict)
    points: dict[int, list[tuple[str, int, int]]] = field(default_factory=dict)  # (kind, x, y) per mille
    first_wrong_step: int | None = None
    ignored: Counter[str] = field(default_factory=Counter)  # result items not understood, by reason


def _text(value: dict[str, Any]) -> str | None:
    text = value.get("text")
    if isinstance(text, list):
        text = "\n".join(str(t) for t in text)
    return str(text).strip() or None if text is not None else None


def parse_result(result: list[dict[str, Any]]) -> Parsed:
    """An annotation's result list as a verdict, step labels and corrections."""
    out = Parsed()
    for item in result or []:
        name, value = item.get("from_name", ""), item.get("value") or {}
        choices = value.get("choices") if isinstance(value, dict) else None
        if name == cfg.VERDICT:
            choice = choices[0] if choices else None
            if choice in cfg.VERDICTS:
                out.verdict = choice
            else:
                out.ignored["bad_verdict"] += 1
            continue
        if name == cfg.FIRST_WRONG:
            number = value.get("number") if isinstance(value, dict) else None
            if isinstance(number, int | float) and number >= 0 and number == int(number):
                out.first_wrong_step = int(number)
            else:
                out.ignored["bad_first_wrong_step"] += 1
            continue
        match = _STEP_FIELD.match(name)
        if match is None:
            out.ignored["unknown_field"] += 1
            continue
        kind, index = match.group(1), int(match.group(2))
        if kind == "step_label":
            label = choices[0] if choices else None
            if label in cfg.STEP_LABELS:
                out.step_labels[str(index)] = label
            else:
                out.ignored["bad_step_label"] += 1
        elif kind == "correct_point":
            kinds = value.get("keypointlabels") or []
            x, y = value.get("x"), value.get("y")
            if (
                len(kinds) == 1
                and kinds[0] in cfg.POINT_KINDS
                and isinstance(x, int | float)
                and isinstance(y, int | float)
            ):
                # Label Studio gives percent of the image; actions use per mille of the screen
                point = (str(kinds[0]), _permille(x), _permille(y))
                out.points.setdefault(index, []).append(point)
            else:
                out.ignored["bad_keypoint"] += 1
        elif (text := _text(value)) is not None:
            fields = {
                "corrected_action": out.actions,
                "corrected_thought": out.thoughts,
                "corrected_instruction": out.instructions,
            }
            fields[kind][index] = text
    return out


def _permille(percent: float) -> int:
    return max(0, min(1000, round(percent * 10)))


def clicked_action(points: list[tuple[str, int, int]]) -> tuple[dict[str, Any] | None, str | None]:
    """(canonical action, parse error) of the keypoints clicked on one step's screen: one click or
    long press, or a swipe's start and end."""
    kinds = sorted(k for k, _, _ in points)
    at = {k: [x, y] for k, x, y in points}
    if kinds in (["click"], ["long_press"]):
        return {"kind": kinds[0], "point": at[kinds[0]]}, None
    if kinds == ["swipe_end", "swipe_start"]:
        return {"kind": "swipe", "point": at["swipe_start"], "to": at["swipe_end"]}, None
    if kinds in (["swipe_start"], ["swipe_end"]):
        return None, "incomplete_swipe"
    return None, "ambiguous_clicks"


def parse_correction(text: str, screen: Screen) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(canonical action, codec name, parse error) of a corrected action as typed."""
    for name in CORRECTION_CODECS:
        try:
            action = CODECS[name].parse(text, screen)
        except ActionError:
            continue
        return action.core().stored(), name, None
    return None, None, "unparseable_correction"


@dataclass
class Independence:
    verdict: bool  # the verdict was not accepted from a pre-fill
    steps: list[int]  # the steps whose label the annotator set (on a blind task: every labelled step)
    accepted_as_is: bool  # the pre-filled verdict and labels submitted without a change


def independence(parsed: Parsed, prefill: dict[str, Any] | None) -> Independence:
    """What of an annotation the annotator decided: a label equal to the critics' pre-fill may have
    been accepted unread, so it is not independent evidence about the critics."""
    labelled = sorted(int(i) for i in parsed.step_labels)
    if prefill is None:
        return Independence(True, labelled, False)
    shown = prefill.get("steps") or {}
    steps = [i for i in labelled if shown.get(str(i)) != parsed.step_labels[str(i)]]
    verdict = parsed.verdict is not None and parsed.verdict != prefill.get("verdict")
    untouched = parsed.step_labels == shown and not verdict
    extra = parsed.actions or parsed.thoughts or parsed.instructions or parsed.points
    return Independence(verdict, steps, untouched and not extra and parsed.first_wrong_step is None)
