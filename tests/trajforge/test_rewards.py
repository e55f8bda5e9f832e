"""The reward module: AgentCPM-GUI's -1/0/1, Step-GUI's dense terms, Mobile-R1's format reward."""

from __future__ import annotations

import json
import math

import pytest

from trajforge.actions import Action, ActionKind, Screen, get_codec
from trajforge.rewards import bbox_reward, compute_score, point_reward

K = ActionKind
TAP = Action(kind=K.CLICK, point=(500, 500))
BBOX = [450, 480, 560, 520]
QWEN_SCREEN = Screen(1092, 2408)  # a 1080x2400 screenshot after smart_resize


def truth(action: Action, fmt: str, bbox: list[int] | None = BBOX, screen: Screen = QWEN_SCREEN) -> str:
    return json.dumps(
        {
            "action": action.model_dump(mode="json", exclude_none=True),
            "bbox": bbox,
            "formatted": get_codec(fmt).format(action, screen),
            "action_format": fmt,
            "coordinate_screen": [screen.width, screen.height],
            "tolerance": 40,
        }
    )


def score(answer: str, gt: str, scheme: str = "binary") -> float:
    return compute_score("trajforge/gui", answer, gt, {"index": 0}, scheme=scheme)["score"]


@pytest.mark.parametrize("fmt", ["qwen", "uitars", "uitars15", "agentcpm", "canonical", "androidworld"])
@pytest.mark.parametrize("scheme", ["binary", "dense"])
def test_the_ground_truth_scores_one_and_garbage_the_format_penalty(fmt: str, scheme: str) -> None:
    gt = truth(TAP, fmt)
    assert score(json.loads(gt)["formatted"], gt, scheme) == 1.0
    assert score("I would tap the button", gt, scheme) == -1.0
    result = compute_score("trajforge/gui", "", gt)
    assert result == {"score": -1.0, "format": 0.0, "correct": 0.0}


def test_binary_is_point_in_bbox_and_dense_decays_with_distance() -> None:
    gt = truth(TAP, "agentcpm")
    inside, outside = '{"POINT":[555,515]}', '{"POINT":[600,500]}'
    assert score(inside, gt) == 1.0 and score(outside, gt) == 0.0
    assert score('{"TYPE":"hi"}', gt) == 0.0  # well-formed, wrong type
    near, far = score('{"POINT":[510,500]}', gt, "dense"), score('{"POINT":[540,500]}', gt, "dense")
    assert near == pytest.approx(math.exp(-((10 / 40) ** 4))) and 1 > near > far > 0
    assert score('{"TYPE":"hi"}', gt, "dense") == 0.0
    without_bbox = truth(TAP, "agentcpm", bbox=None)
    assert (
        score('{"POINT":[530,500]}', without_bbox) == 1.0
        and score('{"POINT":[545,500]}', without_bbox) == 0.0
    )


def test_swipe_cosine_and_exact_arguments() -> None:
    up = Action(kind=K.SWIPE, point=(500, 700), to=(500, 300))
    gt = truth(up, "agentcpm", bbox=None)
    assert score('{"POINT":[500,700],"to":"up"}', gt, "dense") == pytest.approx(1.0)
    assert score('{"POINT":[500,700],"to":"left"}', gt, "dense") == pytest.approx(0.5)
    assert score('{"POINT":[500,700],"to":"down"}', gt, "dense") == pytest.approx(0.0)
    assert score('{"POINT":[500,700],"to":"down"}', gt) == 0.0
    typed = truth(Action(kind=K.TYPE, text="Coffee"), "qwen", bbox=None)
    wrong = (
        '<tool_call>\n{"name": "mobile_use", "arguments": {"action": "type", "text": "Tea"}}\n</tool_call>'
    )
    assert score(wrong, typed) == 0.0 and score(wrong.replace("Tea", "coffee "), typed) == 1.0


def test_point_and_bbox_terms_follow_step_gui() -> None:
    assert point_reward((0, 0), (0, 0), 40) == 1.0
    assert point_reward((40, 0), (0, 0), 40) == pytest.approx(math.exp(-1))
    same = [100, 100, 200, 200]
    assert bbox_reward(same, same, 40) == pytest.approx(1.0)
    shifted = [140, 100, 240, 200]  # centre 40 off: exp(-1) geometry, IoU 60/140
    assert bbox_reward(shifted, same, 40) == pytest.approx(0.8 * math.exp(-1) + 0.2 * (6000 / 14000))


def test_mobiler1_scheme_averages_action_and_tag_rewards() -> None:
    action = Action(
        kind=K.CLICK, point=(500, 500), thought="The search box is on top.", intent="Tap 'Search'"
    )
    gt = truth(action, "mobiler1")
    formatted = json.loads(gt)["formatted"]
    assert score(formatted, gt, "mobiler1") == 1.0
    no_think = formatted.split("</think>", 1)[1]
    assert score(no_think, gt, "mobiler1") == 0.0  # tags missing: no format reward, and not read
    assert score(no_think, gt) == -1.0
    elsewhere = formatted.replace("[546, 1204]", "[100, 100]")
    assert elsewhere != formatted and score(elsewhere, gt, "mobiler1") == 0.5


def test_uitars_answers_need_action_prefix() -> None:
    gt = truth(TAP, "uitars")
    assert score("Action: click(start_box='(500,500)')", gt) == 1.0
    assert score("click(start_box='(500,500)')", gt) == -1.0  # the ui-tars parser asserts "Action:"


def test_bad_configuration_is_one_clear_error() -> None:
    gt = truth(TAP, "qwen")
    with pytest.raises(ValueError, match="unknown reward scheme 'sparse'; known: binary, dense, mobiler1"):
        compute_score("trajforge/gui", "x", gt, scheme="sparse")
    with pytest.raises(ValueError, match="ground truth lacks action_format, coordinate_screen, formatted"):
        compute_score("trajforge/gui", "x", json.dumps({"action": {"kind": "wait"}}))
