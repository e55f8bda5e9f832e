"""Model families: what a checkpoint was trained to be sent, as its own published inference code sends it.

A family is an interface, like a file format. Each one holds, in one place:

- the request builder: the system and user turns, built as the family's official inference code
  builds them (each module cites its source file);
- the history: how many screenshots a request carries, interleaved with which of the model's own
  earlier outputs;
- the image preprocessing the client does before sending (AgentCPM-GUI shrinks the long side to
  1120 pixels; the Qwen2.5-VL fine-tunes send the screenshot as it is and let the server resize);
- the coordinate space the model answers in (`coordinate_screen`): pixels of the server's smart
  resize, or 0-1000;
- the codec that reads its answers (`action_format`).

The rollout (`rollout.policies.vlm`) sends a family's requests and parses its answers in its
coordinate space. `PROMPT_VERSION` is recorded with every episode and in the dataset card.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Protocol

from trajforge.actions import Screen
from trajforge.chat import ImagePart, Message
from trajforge.episode import Step
from trajforge.errors import ConfigError

__all__ = ["FAMILY_NAMES", "PROMPT_VERSION", "Family", "get_family"]


class Family(Protocol):
    name: str
    action_format: str  # the codec that reads its answers
    # the codec's notes its prompt demands in every answer: an exported answer holds exactly these,
    # the model's own where it gave them, else written by the export (`publish.export_rows`)
    asks: tuple[str, ...]
    source: str  # the published inference code its requests reproduce
    images: int  # the most screenshots one request carries
    # text that marks the image's place in the prompt (MiniCPM-V's); an export writes `<image>` there,
    # which the trainer's template for the family writes back
    image_placeholder: str | None

    def coordinate_screen(self, width: int, height: int) -> Screen:
        """The pixel space its coordinates live in, for a screenshot of width x height."""
        ...

    def image(self, png: bytes) -> dict[str, Any]:
        """A screenshot as the family's client sends it (resized and encoded as its code does)."""
        ...

    def messages(
        self, task: str, screen: Screen, history: list[Step], current: str, image: ImagePart
    ) -> list[Message]:
        """The chat messages of one step: `screen` is the raw screenshot's size, `history` the episode's
        earlier steps oldest first, `current` the screenshot now shown."""
        ...


@cache
def _registry() -> dict[str, Family]:
    from trajforge.families.agentcpm import AgentCPMGUI
    from trajforge.families.computer import Qwen25VLComputerUse, UITars15Computer
    from trajforge.families.qwen import GUIOwl, MobileR1, Qwen25VLMobileUse
    from trajforge.families.uitars import UITars15Mobile

    phones = (UITars15Mobile(), Qwen25VLMobileUse(), GUIOwl(), AgentCPMGUI(), MobileR1())
    return {f.name: f for f in (*phones, UITars15Computer(), Qwen25VLComputerUse())}


FAMILY_NAMES = (
    "uitars15",
    "qwen25vl",
    "guiowl",
    "agentcpm",
    "mobiler1",
    "uitars15-computer",
    "qwen25vl-computer",
)
PROMPT_VERSION = "families-1"  # bumped whenever a family's request changes


def get_family(name: str) -> Family:
    """The family called `name`; ConfigError names the known ones."""
    families = _registry()
    if name not in families:
        raise ConfigError(f"unknown model family {name!r}; known: {', '.join(families)}")
    return families[name]
