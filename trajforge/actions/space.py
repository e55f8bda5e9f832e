"""What a model sees of an action format: its coordinate space, its system prompt, and
how a recorded action is put into the shape the format states it in.

Qwen2.5-VL (`qwen`, `mobiler1`) and UI-TARS-1.5 (`uitars15`) answer in pixels of the
image *after* their processor's `smart_resize` (sides rounded to multiples of 28 and
the area kept within a pixel budget), not of the original screenshot; `coordinate_screen`
gives that size, so exported answers and rewards use the coordinates the model predicts.
The other formats are 0-1000 relative and keep the image's own size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from trajforge.actions import ActionCodec
from trajforge.actions.compare import mismatch
from trajforge.actions.model import NORM, Action, Screen
from trajforge.errors import UnsupportedAction

PATCH = 28  # 14-pixel patches merged 2x2: one visual token per 28x28 pixels


@dataclass(frozen=True)
class PixelBudget:
    min_pixels: int
    max_pixels: int


# Qwen2.5-VL's image processor defaults, and UI-TARS-1.5's published smart_resize bounds.
QWEN25VL = PixelBudget(56 * 56, 28 * 28 * 16384)
UITARS15 = PixelBudget(100 * 28 * 28, 16384 * 28 * 28)
GUIOWL = PixelBudget(28 * 28, 28 * 28 * 12800)  # Mobile-Agent-v3 coordinate_resize.py: 1 to 12800 tokens
BUDGETS = {
    "qwen": QWEN25VL,
    "guiowl": GUIOWL,
    "mobiler1": QWEN25VL,
    "uitars15": UITARS15,
    "computer_use": QWEN25VL,
    "uitars15-computer": UITARS15,
}
# The most pixels each trainer feeds a Qwen-style processor by default: LLaMA-Factory shrinks a
# larger image to its `image_max_pixels` (768*768) before the processor's own resize; ms-swift and
# verl hand it to qwen-vl-utils' `fetch_image`, whose bound is the model's own.
TRAINER_MAX_PIXELS = {"llamafactory": 768 * 768, "swift": QWEN25VL.max_pixels, "verl": QWEN25VL.max_pixels}
TRAINERS = tuple(TRAINER_MAX_PIXELS)
# Whose image loading an export sizes for (`datasets export --trainer`, `trainer.images`): auto, the
# trainer the format is for; none, the screenshot as stored.
IMAGE_TRAINERS = (*TRAINERS, "none", "auto")
# Formats whose coordinates are pixels of the image as given (not of a resize the model makes).
IMAGE_PIXELS = {"androidworld", "pyautogui"}

_TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"), undefined=StrictUndefined, autoescape=False
)


def smart_resize(width: int, height: int, budget: PixelBudget = QWEN25VL) -> tuple[int, int]:
    """(width, height) as the Qwen2.5-VL processor resizes an image: multiples of 28, area in budget."""
    h = max(PATCH, round(height / PATCH) * PATCH)
    w = max(PATCH, round(width / PATCH) * PATCH)
    if h * w > budget.max_pixels:
        beta = math.sqrt(height * width / budget.max_pixels)
        h = max(PATCH, math.floor(height / beta / PATCH) * PATCH)
        w = max(PATCH, math.floor(width / beta / PATCH) * PATCH)
    elif h * w < budget.min_pixels:
        beta = math.sqrt(budget.min_pixels / (height * width))
        h = math.ceil(height * beta / PATCH) * PATCH
        w = math.ceil(width * beta / PATCH) * PATCH
    return w, h


def coordinate_screen(action_format: str, width: int, height: int) -> Screen:
    """The pixel space the format's coordinates live in, for an image of width x height."""
    budget = BUDGETS.get(action_format)
    return Screen(*smart_resize(width, height, budget)) if budget else Screen(width, height)


def trainer_input(trainer: str, width: int, height: int) -> tuple[int, int]:
    """The size `trainer` hands the image processor an image of width x height at. LLaMA-Factory 0.9.5
    first shrinks an image above its `image_max_pixels` by f = sqrt(limit / (w*h)) to int(w*f) x int(h*f)
    (`mm_plugin.BasePlugin._preprocess_image`); ms-swift and verl hand it over as it is (qwen-vl-utils'
    `fetch_image` makes the processor's own smart resize)."""
    limit = TRAINER_MAX_PIXELS[trainer]
    if trainer != "llamafactory" or width * height <= limit:
        return width, height
    factor = math.sqrt(limit / (width * height))
    return int(width * factor), int(height * factor)


def export_sizes(
    action_format: str, width: int, height: int, trainer: str | None
) -> tuple[tuple[int, int], tuple[int, int]]:
    """(written, fed): the size an exported screenshot of width x height is written at, and the size
    the trainer's image processor is handed it at, whose processor resize (`coordinate_screen`) is the
    space the answers' pixels live in.

    Without a trainer, and for relative (0-1000) formats, both are the image's own size (a Qwen-style
    format's coordinates then live in the processor's own resize of it). For a trainer, the stored
    bytes are written wherever that trainer's own loading and its processor's default smart resize
    make the resize the format's coordinates assume: ms-swift and verl feed a 1080x2400 screenshot as
    1092x2408; LLaMA-Factory shrinks it to 515x1144 (its 768*768 limit), which its processor feeds as
    504x1148. The coordinates are computed for that, and no image is re-encoded. Otherwise (a format
    whose coordinates are the image's own pixels, IMAGE_PIXELS, or a family budget the processor's
    default would not keep) the image is written at the size the trainer feeds the model, which no
    later resize of that trainer changes.
    """
    budget = BUDGETS.get(action_format, QWEN25VL if action_format in IMAGE_PIXELS else None)
    if budget is None or trainer is None:
        return (width, height), (width, height)
    handed = trainer_input(trainer, width, height)
    if action_format not in IMAGE_PIXELS and smart_resize(*handed, budget) == smart_resize(*handed):
        return (width, height), handed
    cap = PixelBudget(budget.min_pixels, min(TRAINER_MAX_PIXELS[trainer], budget.max_pixels))
    fed = smart_resize(width, height, cap)
    return fed, fed


def image_tokens(width: int, height: int) -> int:
    """Visual tokens Qwen2.5-VL spends on one image of this size (one per 28x28 after resize)."""
    w, h = smart_resize(width, height)
    return (w // PATCH) * (h // PATCH)


def system_prompt(
    action_format: str, screen: Screen, template: str = "mobile_use.j2", thought: bool = True
) -> str:
    """The system prompt stating the format's action space, for a screen of this pixel size.

    `thought=False` states the format without its reasoning slot: the prompt of a training row
    whose answer carries no thought, so the prompt never asks for what the answer lacks.
    """
    return _TEMPLATES.get_template(template).render(
        format=action_format, width=screen.width, height=screen.height, thought=thought
    )


# A knowledge row (Step-GUI §2.1.4: progress tracking, state summary, effect prediction, reflection,
# verification) asks a question about the screen and is answered in plain text, so its system prompt
# states no action contract: training on an action contract answered in prose teaches a model to break
# its own system prompt. Every family exported here is asked questions the way its base model is: the
# Qwen2.5-VL fine-tunes (Qwen2.5-VL mobile_use, Mobile-R1, UI-TARS-1.5, GUI-Owl) with the system prompt
# Qwen2.5-VL's chat template puts before a question when none is given; AgentCPM-GUI publishes no
# question prompt of its own, and gets the same.
KNOWLEDGE_SYSTEM = "You are a helpful assistant."


def knowledge_prompt(action_format: str) -> str:
    """The system prompt of a knowledge row (a question about the screen) in `action_format`'s export."""
    return KNOWLEDGE_SYSTEM


def conform(codec: ActionCodec, action: Action, screen: Screen) -> tuple[Action | None, str]:
    """The action as `codec` states it on `screen`, and what happened: "exact", "converted" or a skip reason.

    An action the format represents exactly is kept. Otherwise the format's own statement of
    it is kept when it does the same thing (a direction swipe drawn as two points, a default
    duration written out, pixel rounding); a missing note the format requires, a note the
    format's markup would change, or a conversion that changes what is done is skipped.
    """
    name = codec.name
    if codec.represents(action):
        return action, "exact"
    for note in getattr(codec, "required_notes", ()):
        if getattr(action, note) is None:
            return None, f"missing_{note}:{name}"
    try:
        stated = codec.parse(codec.format(action, screen), screen)
    except UnsupportedAction as exc:
        return None, f"action_not_representable:{name}:{exc.reason}"
    if (stated.thought, stated.intent) != (action.thought, action.intent):
        return None, f"note_not_representable:{name}"
    pixel = NORM / (min(screen.width, screen.height) - 1) + 1  # rounding through this screen's pixels
    if mismatch(stated, action, [], screen, tolerance=math.ceil(pixel)) is not None:
        return None, f"lossy_conversion:{name}:{action.kind}"
    return stated, "converted"
