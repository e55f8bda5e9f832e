"""UI-TARS-1.5 on a phone, as bytedance/UI-TARS publishes it.

Source: bytedance/UI-TARS, `codes/ui_tars/prompt.py` (`MOBILE_USE_DOUBAO`, the prompt reproduced
below character for character) and `README_deploy.md` with `data/test_messages*.json` (the request
shape: the prompt is the first user message, each screenshot a user message of its own, the model's
earlier outputs assistant messages). History as the UI-TARS agent of OSWorld keeps it: every earlier
output is an assistant turn; the last `images - 1` of them follow their own screenshot; the current
screenshot comes last, so a request carries at most 5 screenshots. Coordinates are pixels of the
image after the processor's smart resize with UI-TARS-1.5's bounds (`codes/ui_tars/action_parser.py`:
`MIN_PIXELS = 100 * 28 * 28`, `MAX_PIXELS = 16384 * 28 * 28`).
"""

from __future__ import annotations

from typing import Any

from trajforge.actions import Screen
from trajforge.actions.space import UITARS15, smart_resize
from trajforge.chat import ImagePart, Message, image_part
from trajforge.episode import Step

MOBILE_USE = (
    "You are a GUI agent. You are given a task and your action history, with screenshots. "
    "You need to perform the next action to complete the task. \n"
    """## Output Format
```
Thought: ...
Action: ...
```
## Action Space

click(point='<point>x1 y1</point>')
long_press(point='<point>x1 y1</point>')
type(content='') #If you want to submit your input, use "\\n" at the end of `content`.
scroll(point='<point>x1 y1</point>', direction='down or up or right or left')
open_app(app_name=\'\')
drag(start_point='<point>x1 y1</point>', end_point='<point>x2 y2</point>')
press_home()
press_back()
finished(content='xxx') # Use escape characters \\', \\", and \\n in content part to ensure we can parse the content in normal python string format.


## Note
- Use {language} in `Thought` part.
- Write a small plan and finally summarize your next action (with its target element) in one sentence in `Thought` part.

## User Instruction
{instruction}
"""
)


class UITars15Mobile:
    name = "uitars15"
    action_format = "uitars15"
    asks: tuple[str, ...] = ("thought",)  # the prompt's `Thought: ...` line
    source = "bytedance/UI-TARS codes/ui_tars/prompt.py MOBILE_USE_DOUBAO"
    images = 5
    image_placeholder: str | None = None
    prompt = MOBILE_USE

    def __init__(self, language: str = "English") -> None:
        self.language = language

    def coordinate_screen(self, width: int, height: int) -> Screen:
        return Screen(*smart_resize(width, height, UITARS15))

    def image(self, png: bytes) -> dict[str, Any]:
        return image_part(png)  # sent as it is: the server's processor resizes it

    def messages(
        self, task: str, screen: Screen, history: list[Step], current: str, image: ImagePart
    ) -> list[Message]:
        prompt = self.prompt.format(language=self.language, instruction=task)
        messages: list[Message] = [{"role": "user", "content": prompt}]
        shown = len(history) - (self.images - 1)  # the earlier turns whose screenshot is still sent
        for i, turn in enumerate(history):
            if i >= shown:
                messages.append({"role": "user", "content": [image(turn.screenshot)]})
            messages.append({"role": "assistant", "content": turn.raw_output})
        messages.append({"role": "user", "content": [image(current)]})
        return messages
