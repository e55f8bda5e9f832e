"""Each model family's request, as its own published inference code builds it (a golden per family).

The goldens under `golden/` were checked line by line against the sources each family module cites
(the UI-TARS prompt, the Qwen2.5-VL cookbook and qwen-agent's function-call template, GUI-Owl's
android_world agent, AgentCPM-GUI's README and schema). A change to a family's request fails here:
review the new request against the source, then bump `PROMPT_VERSION` and rewrite the golden.
Screenshots appear as `{"image": SHA}` placeholders.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from trajforge.actions import Action, ActionKind, Screen, get_codec
from trajforge.episode import Step
from trajforge.errors import ConfigError
from trajforge.families import FAMILY_NAMES, PROMPT_VERSION, get_family
from trajforge.families.agentcpm import resize

GOLDEN = Path(__file__).parent / "golden"
SCREEN = Screen(1080, 2400)
TASK = "Turn on Wi-Fi in Settings"
OUTPUTS = {  # an earlier step's answer, as each family writes one
    "uitars15": "Thought: Settings is open; Wi-Fi is the first row.\nAction: click(point='<point>120 310</point>')",
    "qwen25vl": '<tool_call>\n{"name": "mobile_use", "arguments": {"action": "open", "text": "Settings"}}\n</tool_call>',
    "guiowl": "<thinking>\nOpen Settings first.\n</thinking>\n<tool_call>\n"
    '{"name": "mobile_use", "arguments": {"action": "click", "coordinate": [120, 310]}}\n</tool_call>\n'
    '<conclusion>\nOpened the "Wi-Fi" page\nof Settings.\n</conclusion>',
    "agentcpm": '{"thought":"打开设置","POINT":[111,129]}',
    "mobiler1": "<think>Settings is open; Wi-Fi is the first row.</think>\n<action>Tap  the Wi-Fi\nrow</action>\n"
    '<tool_call>\n{"name": "mobile_use", "arguments": {"action": "click", "coordinate": [120, 310]}}\n</tool_call>',
    "uitars15-computer": "Thought: Open the File menu.\nAction: hotkey(key='ctrl s')",
    "qwen25vl-computer": '<tool_call>\n{"name": "computer_use", "arguments": {"action": "key", "keys": ["ctrl", "s"]}}'
    "\n</tool_call>",
}


def _request(name: str, steps: int) -> list[dict]:
    family = get_family(name)
    history = [earlier_step(i, f"shot{i}", OUTPUTS[name]) for i in range(steps)]
    return family.messages(TASK, SCREEN, history, f"shot{steps}", lambda sha: {"image": sha})


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_each_familys_request_is_its_published_one(name: str) -> None:
    golden = json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))
    assert golden["prompt_version"] == PROMPT_VERSION
    assert _request(name, 2) == golden["request"], f"{name}: review against {get_family(name).source}"


def test_uitars_sends_at_most_five_screenshots_each_before_its_own_answer() -> None:
    """OSWorld's UI-TARS agent (history_n=5): every earlier answer is an assistant turn, the last four
    after their own screenshot, then the current screenshot."""
    messages = _request("uitars15", 7)
    images = [
        m["content"][0]["image"] for m in messages if m["role"] == "user" and isinstance(m["content"], list)
    ]
    assert images == ["shot3", "shot4", "shot5", "shot6", "shot7"]
    roles = [m["role"] for m in messages]
    assert roles == ["user"] + ["assistant"] * 3 + ["user", "assistant"] * 4 + ["user"]
    assert messages[0]["content"].startswith("You are a GUI agent.") and TASK in messages[0]["content"]


def test_single_turn_families_send_one_screenshot_and_their_history_as_text() -> None:
    qwen = _request("qwen25vl", 2)[1]["content"][0]["text"]
    assert qwen.endswith(
        'Step 1: {"name": "mobile_use", "arguments": {"action": "open", "text": "Settings"}}; '
        'Step 2: {"name": "mobile_use", "arguments": {"action": "open", "text": "Settings"}}; '
    )
    owl = _request("guiowl", 2)[1]["content"][0]["text"]
    assert "Step 1: Opened the Wi-Fi pageof Settings.; Step 2: Opened the Wi-Fi pageof Settings.; .\n" in owl
    r1 = _request("mobiler1", 2)[1]["content"][0]["text"]  # its own <action> texts, whitespace folded
    assert r1.endswith(
        f"User Task: {TASK}\nHistorical actions: Step 1: Tap the Wi-Fi row; Step 2: Tap the Wi-Fi row; "
    )
    assert _request("mobiler1", 0)[1]["content"][0]["text"].endswith(f"User Task: {TASK}")
    for name in ("qwen25vl", "guiowl", "agentcpm", "mobiler1"):
        images = [
            p for m in _request(name, 3) for p in (m["content"] if isinstance(m["content"], list) else [])
        ]
        assert [p for p in images if "image" in p] == [{"image": "shot3"}], name


def test_qwen_style_families_state_the_resized_screen_they_answer_in() -> None:
    """The tool states the smart-resized resolution (the image the model sees), not the raw screen."""
    for name, size in (("qwen25vl", "1092x2408"), ("guiowl", "1092x2408"), ("mobiler1", "1092x2408")):
        system = _request(name, 0)[0]["content"]
        assert f"The screen's resolution is {size}." in system and "1080x2400" not in system
        assert get_family(name).coordinate_screen(1080, 2400) == Screen(1092, 2408)
    big = (2160, 4800)  # past GUI-Owl's 12800-token budget, inside Qwen2.5-VL's 16384
    assert get_family("guiowl").coordinate_screen(*big) != get_family("qwen25vl").coordinate_screen(*big)


def test_agentcpm_shrinks_the_long_side_to_1120_and_sends_a_jpeg() -> None:
    png = io.BytesIO()
    Image.new("RGB", (1080, 2400), "white").save(png, format="PNG")
    part = get_family("agentcpm").image(png.getvalue())
    assert part["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert (
        resize(1080, 2400) == (504, 1120)
        and resize(2400, 1080) == (1120, 504)
        and resize(500, 800) == (500, 800)
    )


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_a_tap_stated_in_the_familys_space_lands_where_it_was_meant(name: str) -> None:
    """The family's coordinate space and its codec agree: a tap at an element's centre, written as the
    family writes it, parses back to that centre (0-1000) within a pixel's rounding."""
    family, codec = get_family(name), get_codec(get_family(name).action_format)
    space = family.coordinate_screen(SCREEN.width, SCREEN.height)
    for point in ((500, 500), (37, 911), (999, 3)):
        text = codec.format(Action(kind=ActionKind.CLICK, point=point), space)
        back = codec.parse(text, space).point
        assert back is not None and all(abs(a - b) <= 1 for a, b in zip(back, point, strict=True)), (
            text,
            back,
        )


def test_an_unknown_family_is_one_error_naming_the_known_ones() -> None:
    assert [get_family(name).name for name in FAMILY_NAMES] == list(FAMILY_NAMES)
    with pytest.raises(ConfigError, match="unknown model family 'uitars2'; known: uitars15, qwen25vl"):
        get_family("uitars2")


def earlier_step(index: int, screenshot: str, output: str) -> Step:
    """An earlier step of the episode as a family's history reads it: its screen and the model's words."""
    return Step(index=index, screenshot=screenshot, width=1080, height=2400, raw_output=output)
