"""The Qwen2.5-VL `mobile_use` function call, and GUI-Owl (Mobile-Agent-v3), which speaks it too.

Qwen2.5-VL: QwenLM/Qwen2.5-VL `cookbooks/mobile_agent.ipynb` with `cookbooks/utils/agent_function_call.py`
(`MobileUse`). The system prompt is qwen-agent's `NousFnCallPrompt.preprocess_fncall_messages`
(qwen_agent/llm/fncall_prompts/nous_fncall_prompt.py, `FN_CALL_TEMPLATE`) over "You are a helpful
assistant." and the tool; the tool states the resolution of the image *after* smart resize, the
space the model answers in. The user turn is the query with the task progress as earlier tool calls
("Step 1: {...}; "), then the current screenshot: one image per request.

GUI-Owl: X-PLUG/MobileAgent `Mobile-Agent-v3/android_world_v3/android_world/agents/gui_owl.py` with
`mobile_agent_utils_new.py` (`build_system_messages`, `generate_user_prompt_single_image`),
`function_call_mobile_answer.py` (`AndroidWorldMobileUse`, which adds `answer` and has no `open`) and
`coordinate_resize.py` (`update_image_size_`: at most 12800 visual tokens). The history is the model's
own `<conclusion>` of each earlier step; it reasons in `<thinking>` and ends with a `<conclusion>`.

Mobile-R1 (seed 004, Gu et al. 2025, Appendix A.2 "Prompt for Agent Exploration" and A.4 "Prompts of
Training System", the same text): a Qwen2.5-VL fine-tune that answers `<think>`, `<action>` and
`<tool_call>`. The paper publishes no inference code, and its figure elides the tool's description
("designed to ensure consistency with the Qwen2.5-VL's GUI prompt"), so: the system turn is the
paper's role sentence over qwen-agent's function-call template with the cookbook's `mobile_use` tool,
limited to the paper's eight actions (Table 7: no `open`); the user turn is the paper's instruction
paragraph ending `User Task: {task}`, then the action history as the model's own `<action>` texts
("Step 1: ...; ", the Qwen cookbook's progress layout), then the current screenshot: one image.
"""

from __future__ import annotations

import json
import re
from typing import Any

from trajforge.actions import Screen
from trajforge.actions.space import GUIOWL, QWEN25VL, smart_resize
from trajforge.chat import ImagePart, Message, image_part, text_part
from trajforge.episode import Step

# qwen-agent's FN_CALL_TEMPLATE in its two parts: Mobile-R1's prompt keeps only the second
FN_CALL_HEADER = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
FN_CALL_SIGNATURES = """You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tool_descs}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""
DEFAULT_SYSTEM = "You are a helpful assistant."
POINT = (
    "(x, y): The x (pixels from the left edge) and y (pixels from the top edge) coordinates to move the "
    "mouse to. Required only by `action=click`, `action=long_press`, and `action=swipe`."
)
BUTTON = (
    "Back means returning to the previous interface, Home means returning to the desktop, Menu means "
    "opening the application background menu, and Enter means pressing the enter. Required only by "
    "`action=system_button`"
)
STATUS = {
    "description": "The status of the task. Required only by `action=terminate`.",
    "type": "string",
    "enum": ["success", "failure"],
}
# (action, its line in the action's description), in each tool's order
QWEN_ACTIONS = (
    (
        "key",
        "Perform a key event on the mobile device.\n    - This supports adb's `keyevent` syntax.\n"
        '    - Examples: "volume_up", "volume_down", "power", "camera", "clear".',
    ),
    ("click", "Click the point on the screen with coordinate (x, y)."),
    ("long_press", "Press the point on the screen with coordinate (x, y) for specified seconds."),
    (
        "swipe",
        "Swipe from the starting point with coordinate (x, y) to the end point with coordinates2 (x2, y2).",
    ),
    ("type", "Input the specified text into the activated input box."),
    ("system_button", "Press the system button."),
    ("open", "Open an app on the device."),
    ("wait", "Wait specified seconds for the change to happen."),
    ("terminate", "Terminate the current task and report its completion status."),
)
OWL_ACTIONS = (
    *QWEN_ACTIONS[1:5],
    ("answer", "Output the answer."),
    QWEN_ACTIONS[5],
    *QWEN_ACTIONS[7:],
)


def mobile_use(
    width: int, height: int, actions: tuple[tuple[str, str], ...], text_for: str
) -> dict[str, Any]:
    """The `mobile_use` tool's function as qwen-agent's `BaseTool.function` gives it."""
    description = (
        "Use a touchscreen to interact with a mobile device, and take screenshots.\n"
        "* This is an interface to a mobile device with touchscreen. You can perform actions like "
        "clicking, typing, swiping, etc.\n"
        "* Some applications may take time to start or process actions, so you may need to wait and "
        "take successive screenshots to see the results of your actions.\n"
        f"* The screen's resolution is {width}x{height}.\n"
        "* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the "
        "element. Don't click boxes on their edges unless asked."
    )
    properties = {
        "action": action_property(actions),
        "coordinate": {"description": POINT, "type": "array"},
        "coordinate2": {
            "description": POINT.replace(
                "Required only by `action=click`, `action=long_press`, and `action=swipe`.",
                "Required only by `action=swipe`.",
            ),
            "type": "array",
        },
        "text": {"description": f"Required only by {text_for}.", "type": "string"},
        "time": {
            "description": "The seconds to wait. Required only by `action=long_press` and `action=wait`.",
            "type": "number",
        },
        "button": {"description": BUTTON, "enum": ["Back", "Home", "Menu", "Enter"], "type": "string"},
        "status": STATUS,
    }
    parameters = {"properties": properties, "required": ["action"], "type": "object"}
    return {"name": "mobile_use", "description": description, "parameters": parameters}


def action_property(actions: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """A tool's `action` parameter: each action listed with its line, then their names as the enum."""
    listed = "\n".join(f"* `{name}`: {line}" for name, line in actions)
    return {
        "description": f"The action to perform. The available actions are:\n{listed}",
        "enum": [name for name, _ in actions],
        "type": "string",
    }


def tool_signatures(function: dict[str, Any]) -> str:
    """The part of qwen-agent's Nous function-call template that lists the tool and the call format."""
    tool = json.dumps({"type": "function", "function": function}, ensure_ascii=False)
    return FN_CALL_SIGNATURES.format(tool_descs=tool)


def tool_system(function: dict[str, Any]) -> str:
    """qwen-agent's Nous function-call system prompt over the default system message."""
    return DEFAULT_SYSTEM + "\n\n" + FN_CALL_HEADER + tool_signatures(function)


R1_ROLE = (
    "You are a mobile GUI agent. You are given a task and your action history, with screenshots. You "
    "need to perform the next action to complete the task."
)
R1_ASK = (
    "Analyze the task and historical actions, and predict the next step. Output your reasoning process "
    "within the <think></think> tag. Output the action to be performed in this step within the "
    "<action></action> tag. Output the final answer within the <tool_call></tool_call> tag. User Task: "
)
R1_ACTIONS = tuple(action for action in QWEN_ACTIONS if action[0] != "open")  # Table 7's eight


_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)
_ACTION = re.compile(r"<action>(.*?)</action>", re.S)
_CONCLUSION = re.compile(r"<conclusion>\n?(.*?)\n?</conclusion>", re.S)


class Qwen25VLMobileUse:
    name = "qwen25vl"
    action_format = "qwen"
    asks: tuple[str, ...] = ()  # the cookbook's prompt asks for the tool call alone
    source = (
        "QwenLM/Qwen2.5-VL cookbooks/mobile_agent.ipynb + cookbooks/utils/agent_function_call.py MobileUse"
    )
    images = 1
    image_placeholder: str | None = None
    budget = QWEN25VL  # the processor's published defaults

    def coordinate_screen(self, width: int, height: int) -> Screen:
        return Screen(*smart_resize(width, height, self.budget))

    def image(self, png: bytes) -> dict[str, Any]:
        return image_part(png)

    def messages(
        self, task: str, screen: Screen, history: list[Step], current: str, image: ImagePart
    ) -> list[Message]:
        resized = self.coordinate_screen(screen.width, screen.height)
        system = tool_system(
            mobile_use(
                resized.width, resized.height, QWEN_ACTIONS, "`action=key`, `action=type`, and `action=open`"
            )
        )
        steps = "".join(f"Step {i}: {_call(turn.raw_output)}; " for i, turn in enumerate(history, 1))
        query = (
            f"The user query:  {task}\n"
            f"Task progress (You have done the following operation on the current device): {steps}"
        )
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": [text_part(query), image(current)]},
        ]


class GUIOwl(Qwen25VLMobileUse):
    name = "guiowl"
    source = (
        "X-PLUG/MobileAgent Mobile-Agent-v3 android_world_v3 agents/gui_owl.py + mobile_agent_utils_new.py"
    )
    action_format = "guiowl"  # <thinking>, the call, <conclusion>: what gui_owl.py reads
    asks: tuple[str, ...] = ("thought", "intent")  # <thinking> and <conclusion>, which gui_owl.py splits on
    budget = GUIOWL  # update_image_size_: 1 to 12800 visual tokens

    def messages(
        self, task: str, screen: Screen, history: list[Step], current: str, image: ImagePart
    ) -> list[Message]:
        resized = self.coordinate_screen(screen.width, screen.height)
        system = tool_system(
            mobile_use(resized.width, resized.height, OWL_ACTIONS, "`action=type` and `action=answer`")
        )
        said = [(i, _conclusion(turn.raw_output)) for i, turn in enumerate(history, 1)]
        steps = "".join(f"Step {i}: {summary}; " for i, summary in said if summary)
        query = (
            f"The user query: {task}"
            f"\nTask progress (You have done the following operation on the current device): {steps}.\n"
            "\nBefore answering, explain your reasoning step-by-step in <thinking></thinking> tags, and insert "
            "them before the <tool_call></tool_call> XML tags."
            "\nAfter answering, summarize your action in <conclusion></conclusion> tags, and insert them after "
            "the <tool_call></tool_call> XML tags."
        )
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": [text_part(query), image(current)]},
        ]


def _call(output: str) -> str:
    """An earlier step's tool call as the cookbook's history writes it (json.dumps of the call); the raw
    output, whitespace folded, when it held none."""
    found = _TOOL_CALL.search(output)
    if found:
        try:
            return json.dumps(json.loads(found[1]), ensure_ascii=False)
        except ValueError:
            pass
    return " ".join(output.split())


def _conclusion(output: str) -> str | None:
    """GUI-Owl's summary of an earlier step, as gui_owl.py puts it in the history (newlines and double
    quotes removed); None when the output had none (gui_owl.py then skips the step)."""
    found = _CONCLUSION.search(output)
    return found[1].replace("\n", "").replace('"', "") if found else None


class MobileR1(Qwen25VLMobileUse):
    name = "mobiler1"
    action_format = "mobiler1"  # <think>, <action>, <tool_call>
    asks: tuple[str, ...] = ("thought", "intent")  # the three-part answer its prompt demands
    source = "Mobile-R1 (arXiv 2506.20332) Appendix A.2/A.4 prompt, over the Qwen2.5-VL cookbook's mobile_use"

    def messages(
        self, task: str, screen: Screen, history: list[Step], current: str, image: ImagePart
    ) -> list[Message]:
        resized = self.coordinate_screen(screen.width, screen.height)
        tool = mobile_use(resized.width, resized.height, R1_ACTIONS, "`action=key` and `action=type`")
        system = R1_ROLE + " " + tool_signatures(tool)
        steps = "".join(f"Step {i}: {_action(turn.raw_output)}; " for i, turn in enumerate(history, 1))
        query = R1_ASK + task + (f"\nHistorical actions: {steps}" if steps else "")
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": [text_part(query), image(current)]},
        ]


def _action(output: str) -> str:
    """An earlier step as Mobile-R1's history gives it: the model's own `<action>` text, whitespace
    folded; its tool call (`_call`) where it wrote none."""
    found = _ACTION.search(output)
    return " ".join(found[1].split()) if found and found[1].strip() else _call(output)
