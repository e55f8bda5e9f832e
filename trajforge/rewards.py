"""Rule rewards for one predicted GUI action against an exported ground truth.

This file is what a verl user points at, through the `reward.py` every rl-verl export writes
beside its parquet (a copy of this module and the parsers it runs on, needing only pydantic, so
the trainer's environment needs no trajforge), or directly where trajforge is installed:

    reward.custom_reward_function.path=/data/tf4/reward.py   # or pkg://trajforge.rewards
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.scheme=binary   # or dense, mobiler1

`ground_truth` is the JSON string the `rl-verl` export writes in `reward_model.ground_truth`:
the canonical action (0-1000), its text in the row's action format (`formatted`), the
`action_format`, the pixel size its coordinates live in (`coordinate_screen`), the target
element's 0-1000 `bbox` (or null) and a `tolerance` in 0-1000 units.

Schemes:
- `binary` (AgentCPM-GUI §3.5): -1 when the answer fails the format check, 0 when it is
  well-formed but wrong, 1 when right; a point is right inside the target's bbox (within
  `tolerance` of the reference point when there is no bbox).
- `dense` (Step-GUI §2.2.3): -1 on a format failure, 0 on a wrong action type, else the
  value term: quartic point decay exp(-(dx^4 + dy^4)) with d the offset over `tolerance`,
  the swipe direction cosine mapped to [0, 1], exact match for text, key and status.
  `bbox_reward` (geometry energy fused with IoU) scores region answers.
- `mobiler1` (Mobile-R1 stage 2): the mean of the action reward (binary, 0/1) and the format
  reward (1 when `<think>`, `<action>` and `<tool_call>` are all there, filled and in order).

The format check is the one each family's own parser applies: a parsable `<tool_call>` for
qwen, the three tags for mobiler1, `Action:` for the UI-TARS parser, AgentCPM-GUI's JSON keys.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from trajforge.actions import Action, ActionKind, Screen, get_codec
from trajforge.actions.model import POINTED_KINDS
from trajforge.errors import ParseError, UnsupportedAction

SCHEMES = ("binary", "dense", "mobiler1")
FORMAT_PENALTY = -1.0
_MOBILER1 = re.compile(
    r"^\s*<think>(.+?)</?think>\s*<action>(.+?)</action>\s*<tool_call>(.+?)</tool_call>\s*$", re.S
)
_UNIT = {"up": (0.0, -1.0), "down": (0.0, 1.0), "left": (-1.0, 0.0), "right": (1.0, 0.0)}


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str | dict[str, Any],
    extra_info: dict[str, Any] | None = None,
    scheme: str = "binary",
    **_: Any,
) -> dict[str, float]:
    """verl's reward-function signature: `score` is the reward; `format`, `correct` are logged beside it."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown reward scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    truth = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    missing = {"formatted", "action_format", "coordinate_screen"} - set(truth)
    if missing:
        raise ValueError(
            f"ground truth lacks {', '.join(sorted(missing))}: re-export the version with "
            f"`trajforge datasets export --format rl-verl` (data_source {data_source!r})"
        )
    fmt = truth["action_format"]
    codec, screen = get_codec(fmt), Screen(*truth["coordinate_screen"])
    reference = codec.parse(truth["formatted"], screen)
    well_formed = format_ok(solution_str, fmt)
    try:
        predicted = codec.parse(solution_str, screen) if well_formed else None
    except (ParseError, UnsupportedAction):
        predicted = None
    tolerance = float(truth.get("tolerance", 40))
    correct = predicted is not None and action_correct(predicted, reference, truth.get("bbox"), tolerance)
    if scheme == "mobiler1":
        score = (float(correct) + float(well_formed and predicted is not None)) / 2
    elif predicted is None:
        score = FORMAT_PENALTY
    elif scheme == "dense":
        score = dense_value(predicted, reference, tolerance)
    else:
        score = float(correct)
    return {"score": score, "format": float(predicted is not None), "correct": float(correct)}


def format_ok(text: str, action_format: str) -> bool:
    """The structural rule of the family's own parser, before the action itself is read."""
    if action_format == "mobiler1":
        return _MOBILER1.match(text) is not None
    if action_format in ("uitars", "uitars15", "uitars15-computer"):
        return "Action:" in text  # ui-tars' parse_action_to_structure_output asserts this
    if action_format in ("qwen", "computer_use"):
        return "<tool_call>" in text and "</tool_call>" in text
    return bool(text.strip())


def action_correct(predicted: Action, reference: Action, bbox: list[int] | None, tolerance: float) -> bool:
    """AgentCPM-GUI §3.5 / Mobile-R1 R_Act: same type, point inside the target, same argument."""
    if predicted.kind != reference.kind:
        return False
    kind = reference.kind
    if kind in POINTED_KINDS:
        assert predicted.point is not None and reference.point is not None
        if bbox is not None:
            # not `actions.compare.inside`: the reward ships without compare (`export_rows.REWARD_MODULES`)
            x1, y1, x2, y2 = bbox
            return x1 <= predicted.point[0] <= x2 and y1 <= predicted.point[1] <= y2
        return math.dist(predicted.point, reference.point) <= tolerance
    if kind == ActionKind.SWIPE:
        return predicted.swipe_direction() == reference.swipe_direction()
    if kind in (ActionKind.TYPE, ActionKind.OPEN_APP, ActionKind.ANSWER):
        return (predicted.text or "").strip().casefold() == (reference.text or "").strip().casefold()
    if kind == ActionKind.PRESS:
        return predicted.key == reference.key
    if kind == ActionKind.TERMINATE:
        return predicted.status == reference.status
    if kind == ActionKind.SCROLL:
        return predicted.direction == reference.direction
    if kind == ActionKind.HOTKEY:
        return predicted.text == reference.text
    if kind == ActionKind.DRAG:
        assert predicted.to is not None and reference.to is not None
        return math.dist(predicted.to, reference.to) <= tolerance
    return True  # wait


def dense_value(predicted: Action, reference: Action, tolerance: float) -> float:
    """Step-GUI §2.2.3: 0 on a wrong type, else the type's dense value term in [0, 1]."""
    if predicted.kind != reference.kind:
        return 0.0
    kind = reference.kind
    if kind in POINTED_KINDS:
        assert predicted.point is not None and reference.point is not None
        return point_reward(predicted.point, reference.point, tolerance)
    if kind == ActionKind.SWIPE:
        return (_cosine(_vector(predicted), _vector(reference)) + 1) / 2
    return float(action_correct(predicted, reference, None, tolerance))


def point_reward(predicted: tuple[float, float], reference: tuple[float, float], tolerance: float) -> float:
    """exp(-(dx^4 + dy^4)), d = |offset| / tolerance on each axis (Step-GUI eq. 2)."""
    dx = abs(predicted[0] - reference[0]) / tolerance
    dy = abs(predicted[1] - reference[1]) / tolerance
    return math.exp(-(dx**4 + dy**4))


def bbox_reward(
    predicted: Sequence[float],
    reference: Sequence[float],
    tolerance: float,
    alpha: float = 0.8,
    lam: float = 0.5,
) -> float:
    """Step-GUI eqs. 3-4: alpha * exp(-E_geom) + (1 - alpha) * IoU, boxes as x1, y1, x2, y2."""

    def centre_size(b: Sequence[float]) -> tuple[float, float, float, float]:
        return ((b[0] + b[2]) / 2, (b[1] + b[3]) / 2, b[2] - b[0], b[3] - b[1])

    p, r = centre_size(predicted), centre_size(reference)
    d = [abs(a - b) / tolerance for a, b in zip(p, r, strict=True)]
    energy = d[0] ** 4 + d[1] ** 4 + lam * d[2] ** 4 + lam * d[3] ** 4
    return alpha * math.exp(-energy) + (1 - alpha) * _iou(predicted, reference)


def _iou(a: Sequence[float], b: Sequence[float]) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _vector(action: Action) -> tuple[float, float]:
    if action.to is None:
        return _UNIT[action.swipe_direction()]
    assert action.point is not None
    return (action.to[0] - action.point[0], action.to[1] - action.point[1])


def _cosine(a: tuple[float, float], b: tuple[float, float]) -> float:
    na, nb = math.hypot(*a), math.hypot(*b)
    if na == 0 or nb == 0:
        return 0.0
    return (a[0] * b[0] + a[1] * b[1]) / (na * nb)
