"""AgentCPM-GUI, as OpenBMB/AgentCPM-GUI's README serves it through vLLM.

Source: OpenBMB/AgentCPM-GUI `README.md`, "vLLM Inference": the Chinese system prompt over the
action schema (`eval/utils/schema/schema.json`, shipped beside this file unchanged) with `thought`
required, written as compact JSON; one user turn, `<Question>{task}</Question>\\n当前屏幕截图：(<image>./</image>)`
and the screenshot as a JPEG whose long side is shrunk to at most 1120 pixels (`__resize__`, LANCZOS).
No history: every step is a single turn. Coordinates are 0-1000 of the screen.
"""

from __future__ import annotations

import io
import json
from functools import cache
from pathlib import Path
from typing import Any

from PIL import Image

from trajforge.actions import Screen
from trajforge.chat import ImagePart, Message, image_part, text_part
from trajforge.episode import Step

MAX_SIDE = 1120


@cache
def system_prompt(thought: bool = True) -> str:
    """The README's SYSTEM_PROMPT: the schema with ("required", ["thought"]) inserted as its 4th key."""
    schema = json.loads((Path(__file__).parent / "agentcpm_schema.json").read_text(encoding="utf-8"))
    items = list(schema.items())
    items.insert(3, ("required", ["thought"] if thought else []))
    compact = json.dumps(dict(items), indent=None, ensure_ascii=False, separators=(",", ":"))
    return (
        "# Role\n"
        "你是一名熟悉安卓系统触屏GUI操作的智能体，将根据用户的问题，分析当前界面的GUI元素和布局，生成相应的操作。\n\n"
        "# Task\n"
        "针对用户问题，根据输入的当前屏幕截图，输出下一步的操作。\n\n"
        "# Rule\n"
        "- 以紧凑JSON格式输出\n"
        "- 输出操作必须遵循Schema约束\n\n"
        f"# Schema\n{compact}"
    )


def resize(width: int, height: int) -> tuple[int, int]:
    """The README's `__resize__`: the long side at most 1120, the other scaled and truncated."""
    if height > MAX_SIDE:
        width, height = int(width * MAX_SIDE / height), MAX_SIDE
    if width > MAX_SIDE:
        width, height = MAX_SIDE, int(height * MAX_SIDE / width)
    return width, height


class AgentCPMGUI:
    name = "agentcpm"
    action_format = "agentcpm"
    asks: tuple[str, ...] = ("thought",)  # the schema's "required": ["thought"]
    source = "OpenBMB/AgentCPM-GUI README.md (vLLM Inference) + eval/utils/schema/schema.json"
    images = 1
    image_placeholder: str | None = (
        "(<image>./</image>)"  # MiniCPM-V's: where its chat template puts the image
    )

    def coordinate_screen(self, width: int, height: int) -> Screen:
        return Screen(width, height)  # 0-1000 of the screen: the size does not matter

    def image(self, png: bytes) -> dict[str, Any]:
        with Image.open(io.BytesIO(png)) as img:
            rgb = img.convert("RGB")
            shrunk = rgb.resize(resize(*rgb.size), resample=Image.Resampling.LANCZOS)
            out = io.BytesIO()
            shrunk.save(out, format="JPEG")
        return image_part(out.getvalue(), "image/jpeg")

    def messages(
        self, task: str, screen: Screen, history: list[Step], current: str, image: ImagePart
    ) -> list[Message]:
        question = f"<Question>{task}</Question>\n当前屏幕截图：{self.image_placeholder}"
        return [
            {"role": "system", "content": system_prompt()},
            {"role": "user", "content": [text_part(question), image(current)]},
        ]
