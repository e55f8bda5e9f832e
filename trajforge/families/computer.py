"""The desktop families: UI-TARS-1.5 and Qwen2.5-VL on a computer, as their publishers' code sends them.

UI-TARS-1.5: bytedance/UI-TARS `codes/ui_tars/prompt.py` (`COMPUTER_USE_DOUBAO`, reproduced below
character for character); the request and its history are the phone family's (`uitars.py`), and
answers are read by `uitars15-computer`.

Qwen2.5-VL: QwenLM/Qwen2.5-VL `cookbooks/utils/agent_function_call.py` (`ComputerUse`, its function)
and `cookbooks/computer_use.ipynb` (`perform_gui_grounding_with_api`: the system prompt is qwen-agent's
Nous function-call template over "You are a helpful assistant." and the tool, stating the screen as
the image after smart resize; the user turn is the screenshot, then the query). The cookbook sends
no history: each request is the current screenshot and the instruction. Answers are read by
`computer_use`.
"""

from __future__ import annotations

from typing import Any

from trajforge.actions import Screen
from trajforge.chat import ImagePart, Message, text_part
from trajforge.episode import Step
from trajforge.families.qwen import POINT, STATUS, Qwen25VLMobileUse, action_property, tool_system
from trajforge.families.uitars import UITars15Mobile

COMPUTER_USE = """You are a GUI agent. You are given a task and your action history, with screenshots. \
You need to perform the next action to complete the task.

## Output Format
```
Thought: ...
Action: ...
```

## Action Space

click(point='<point>x1 y1</point>')
left_double(point='<point>x1 y1</point>')
right_single(point='<point>x1 y1</point>')
drag(start_point='<point>x1 y1</point>', end_point='<point>x2 y2</point>')
hotkey(key='ctrl c') # Split keys with a space and use lowercase. Also, do not use more than 3 keys in one \
hotkey action.
type(content='xxx') # Use escape characters \\', \\", and \\n in content part to ensure we can parse the \
content in normal python string format. If you want to submit your input, use \\n at the end of content. \n\
scroll(point='<point>x1 y1</point>', direction='down or up or right or left') # Show more information on \
the `direction` side.
wait() #Sleep for 5s and take a screenshot to check for any changes.
finished(content='xxx') # Use escape characters \\', \\", and \\n in content part to ensure we can parse \
the content in normal python string format.


## Note
- Use {language} in `Thought` part.
- Write a small plan and finally summarize your next action (with its target element) in one sentence in \
`Thought` part.

## User Instruction
{instruction}
"""

COMPUTER_ACTIONS = (
    (
        "key",
        "Performs key down presses on the arguments passed in order, then performs key releases in reverse order.",
    ),
    ("type", "Type a string of text on the keyboard."),
    ("mouse_move", "Move the cursor to a specified (x, y) pixel coordinate on the screen."),
    ("left_click", "Click the left mouse button."),
    ("left_click_drag", "Click and drag the cursor to a specified (x, y) pixel coordinate on the screen."),
    ("right_click", "Click the right mouse button."),
    ("middle_click", "Click the middle mouse button."),
    ("double_click", "Double-click the left mouse button."),
    ("scroll", "Performs a scroll of the mouse scroll wheel."),
    ("wait", "Wait specified seconds for the change to happen."),
    ("terminate", "Terminate the current task and report its completion status."),
)


def computer_use(width: int, height: int) -> dict[str, Any]:
    """The `computer_use` tool's function as qwen-agent's `BaseTool.function` gives it."""
    description = (
        "Use a mouse and keyboard to interact with a computer, and take screenshots.\n"
        "* This is an interface to a desktop GUI. You do not have access to a terminal or applications menu. "
        "You must click on desktop icons to start applications.\n"
        "* Some applications may take time to start or process actions, so you may need to wait and take "
        "successive screenshots to see the results of your actions. E.g. if you click on Firefox and a window "
        "doesn't open, try wait and taking another screenshot.\n"
        f"* The screen's resolution is {width}x{height}.\n"
        "* Whenever you intend to move the cursor to click on an element like an icon, you should consult a "
        "screenshot to determine the coordinates of the element before moving the cursor.\n"
        "* If you tried clicking on a program or link but it failed to load, even after waiting, try adjusting "
        "your cursor position so that the tip of the cursor visually falls on the element that you want to "
        "click.\n"
        "* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the element. "
        "Don't click boxes on their edges unless asked."
    )
    properties = {
        "action": action_property(COMPUTER_ACTIONS),
        "keys": {"description": "Required only by `action=key`.", "type": "array"},
        "text": {"description": "Required only by `action=type`.", "type": "string"},
        "coordinate": {
            "description": POINT.replace(
                "Required only by `action=click`, `action=long_press`, and `action=swipe`.",
                "Required only by `action=mouse_move` and `action=left_click_drag`.",
            ),
            "type": "array",
        },
        "pixels": {
            "description": "The amount of scrolling to perform. Positive values scroll up, negative values scroll "
            "down. Required only by `action=scroll`.",
            "type": "number",
        },
        "time": {"description": "The seconds to wait. Required only by `action=wait`.", "type": "number"},
        "status": STATUS,
    }
    parameters = {"properties": properties, "required": ["action"], "type": "object"}
    return {"name": "computer_use", "description": description, "parameters": parameters}


class UITars15Computer(UITars15Mobile):
    name = "uitars15-computer"
    action_format = "uitars15-computer"
    source = "bytedance/UI-TARS codes/ui_tars/prompt.py COMPUTER_USE_DOUBAO"
    prompt = COMPUTER_USE


class Qwen25VLComputerUse(Qwen25VLMobileUse):
    name = "qwen25vl-computer"
    action_format = "computer_use"
    source = (
        "QwenLM/Qwen2.5-VL cookbooks/computer_use.ipynb + cookbooks/utils/agent_function_call.py ComputerUse"
    )

    def messages(
        self, task: str, screen: Screen, history: list[Step], current: str, image: ImagePart
    ) -> list[Message]:
        resized = self.coordinate_screen(screen.width, screen.height)
        system = tool_system(computer_use(resized.width, resized.height))
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": [image(current), text_part(task)]},
        ]
