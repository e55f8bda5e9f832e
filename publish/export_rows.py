"""What one exported row holds: the answer in the chosen action format, the system prompt, the
ground truth rewards score against, and the dataset card describing it all."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import trajforge
from publish.export_family import FamilyShaper
from publish.export_notes import answer_notes, offline_thought
from storage.datasets import Manifest
from trajforge.actions import get_codec
from trajforge.actions.space import (
    BUDGETS,
    KNOWLEDGE_SYSTEM,
    conform,
    coordinate_screen,
    image_tokens,
    knowledge_prompt,
    system_prompt,
)
from trajforge.logs import counts
from trajforge.sample import target_action

IMAGE_TOKEN = "<image>"
# recorded: a row's prompt asks for a thought only where its answer has one (a format that
# requires one gets the offline thought); always: every action row carries a thought.
THOUGHTS = ("recorded", "always")


@dataclass
class ExportReport:
    format: str
    out: str
    rows: Counter[str] = field(default_factory=Counter)  # by split
    images: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # by reason
    converted: Counter[str] = field(default_factory=Counter)  # format:kind stated differently, same effect
    repeated: int = 0  # extra SFT rows written for weight > 1
    max_image_tokens: int = 0  # Qwen2.5-VL visual tokens of the row with the most
    max_prompt_chars: int = 0  # system + user text of the longest row
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the export did that a user should know
    trainer: str | None = None  # whose image size the images and coordinates are written for
    coordinate_sizes: Counter[str] = field(default_factory=Counter)  # "WxH" the answers assume, by rows
    offline_thoughts: int = 0  # action rows whose thought the export wrote from the step's evidence
    # a family export's action rows compared with the request their rollout sent, and those that differ
    prompts_checked: int | None = None
    prompt_mismatches: int = 0

    def render(self) -> str:
        rows = counts(self.rows)
        return (
            f"exported {sum(self.rows.values())} rows ({rows}) as {self.format} to {self.out}; "
            f"{self.images} images; skipped: {counts(self.skipped)}; converted: {counts(self.converted)}; "
            f"repeated for weight: {self.repeated}; longest prompt: {self.max_image_tokens} image tokens "
            f"+ {self.max_prompt_chars} characters (verl: data.max_prompt_length >= "
            f"{self.prompt_length_hint()})\n{self.coordinates()}"
            + (
                f"\nprompt check: {self.prompts_checked} action rows compared with the request their "
                f"rollout sent: {self.prompt_mismatches} differ"
                if self.prompts_checked is not None
                else ""
            )
            + "".join(f"\nnote: {n}" for n in self.notes)
        )

    def coordinates(self) -> str:
        """What image the answers' coordinates assume, for the trainer the export was written for."""
        fed = f"as {self.trainer} feeds them" if self.trainer else "as written"
        return (
            f"images: coordinates assume images of {counts(self.coordinate_sizes) or 'no size'} ({fed}); "
            f"offline thoughts: {self.offline_thoughts}"
        )

    def measure(self, rendered: Rendered, row: dict[str, Any], sizes: dict[str, tuple[int, int]]) -> None:
        """Count one written row toward the longest prompt (`sizes`: exported image sizes by sha)."""
        tokens = sum(image_tokens(*sizes[sha]) for sha in rendered.shown(row))
        self.max_image_tokens = max(self.max_image_tokens, tokens)
        chars = (
            sum(len(m["content"]) for m in rendered.chat[:-1])
            if rendered.chat is not None
            else len(rendered.system) + len(row["prompt"])
        )
        self.max_prompt_chars = max(self.max_prompt_chars, chars)

    def prompt_length_hint(self) -> int:
        """A max_prompt_length no row exceeds: image tokens plus at most one token per character."""
        return self.max_image_tokens + self.max_prompt_chars


@dataclass
class Rendered:
    """One row as a trainer sees it: the system prompt, the answer, and (for actions) its ground truth.

    A family-shaped row (`publish.export_family`) has its whole conversation in `chat` (ending with
    the answer) and the screenshots its `<image>` tags stand for in `images`."""

    system: str
    answer: str
    truth: dict[str, Any] | None
    chat: list[dict[str, str]] | None = None
    images: list[str] | None = None

    def shown(self, row: dict[str, Any]) -> list[str]:
        """The screenshots the row shows, in order."""
        return self.images if self.images is not None else list(row["images"])


def has_action(row: dict[str, Any]) -> bool:
    """Whether the row's answer is an action (only those have a ground truth to reward)."""
    return json.loads(row["payload"]).get("action") is not None


def render_row(
    row: dict[str, Any],
    action_format: str,
    size: tuple[int, int],
    report: ExportReport,
    thoughts: str = "recorded",
    shaper: FamilyShaper | None = None,
) -> Rendered | None:
    """The row in `action_format` for an image of `size` (the exported screenshot), or None when skipped.

    The system prompt asks for a thought only when the answer carries one. An action row without
    a recorded thought gets one written from its own evidence (`offline_thought`) where the
    format requires a thought (mobiler1) or `thoughts` is "always". With a family's `shaper`, an
    action row is that family's conversation, in its coordinate space.
    """
    payload = json.loads(row["payload"])
    codec = get_codec(action_format)
    screen = shaper.screen(size) if shaper is not None else coordinate_screen(action_format, *size)
    target = payload.get("action")
    if target is None:
        return Rendered(knowledge_prompt(action_format), row["response"], None)  # a question, not an action
    notes, written = answer_notes(codec.notes, payload, shaper.family.asks if shaper is not None else None)
    wanted = thoughts == "always" or "thought" in getattr(codec, "required_notes", ())
    if shaper is not None:
        wanted = "thought" in shaper.family.asks  # the family's prompt, not the flag, says what it asks
    if "thought" in notes and notes["thought"] is None and wanted:
        notes["thought"] = offline_thought(row["prompt"], payload)
        written.append("thought")
        report.offline_thoughts += 1
    action = target_action({**target, **notes})
    stated, how = conform(codec, action, screen)
    if stated is None:
        report.skipped[how] += 1
        return None
    if how == "converted":
        report.converted[f"{action_format}:{action.kind}"] += 1
    text = codec.format(stated, screen)
    if shaper is not None and not written:  # the model's own output, verbatim, where it is this answer
        text = shaper.served_answer(row, stated, size) or text
    report.coordinate_sizes[f"{screen.width}x{screen.height}"] += 1
    truth = {
        "action": target,
        "bbox": payload.get("bbox"),
        "screen": payload.get("screen") or list(size),
        "coordinate_screen": [screen.width, screen.height],
        "formatted": text,
        "action_format": action_format,
        **({"written": sorted(written)} if written else {}),  # notes the export wrote, not the policy
    }
    if shaper is not None:
        shaped = shaper.conversation(row, text, size)
        if shaped is None:
            report.skipped[f"no_task_for_family:{shaper.family.name}"] += 1
            return None
        return Rendered("", text, {**truth, "family": shaper.family.name}, *shaped)
    return Rendered(system_prompt(action_format, screen, thought=stated.thought is not None), text, truth)


def hf_row(row: dict[str, Any], images: list[dict[str, Any]], rendered: Rendered) -> dict[str, Any]:
    return {
        "uid": row["uid"],
        "category": row["category"],
        "query": row["query"],
        "round": row["round"],
        "images": images,
        "system": rendered.system,
        "prompt": row["prompt"],
        "response": rendered.answer,
        "ground_truth": json.dumps(rendered.truth, ensure_ascii=False) if rendered.truth else None,
        "weight": row["weight"],
        "provenance": row["provenance"],
    }


def verl_row(
    man: Manifest,
    row: dict[str, Any],
    images: list[dict[str, Any]],
    rendered: Rendered,
    tolerance: int,
    index: int,
) -> dict[str, Any]:
    assert rendered.truth is not None
    return {
        "data_source": f"trajforge/{man.dataset}",
        "prompt": rendered.chat[:-1]
        if rendered.chat is not None
        else [
            {"role": "system", "content": rendered.system},
            {"role": "user", "content": IMAGE_TOKEN * len(images) + row["prompt"]},
        ],
        "images": images,
        "ability": "gui_agent",
        "reward_model": {
            "style": "rule",
            "ground_truth": json.dumps({**rendered.truth, "tolerance": tolerance}, ensure_ascii=False),
        },
        "extra_info": {
            "index": index,
            "uid": row["uid"],
            "split": row["split"],
            "category": row["category"],
            "query": row["query"],
            "episode": row["episode"],
            "step": row["step"],
            "weight": row["weight"],
            "provenance": row["provenance"],
        },
    }


# The hf export's columns: (name, datasets dtype or "images", what it holds).
HF_COLUMNS = (
    ("uid", "string", "the sample's stable id (sha256 of its content and lineage)"),
    ("category", "string", "the CSRS data category (action_prediction, thought, ...)"),
    ("query", "string", "the task query the episode was rolled out for"),
    ("round", "int64", "the engine round that produced it"),
    ("images", "images", "the screenshots, oldest first; the last is the current screen"),
    ("system", "string", "the system prompt: the action space for action rows, none for questions"),
    ("prompt", "string", "the user turn's text"),
    ("response", "string", "the answer, in the export's action format for action rows"),
    ("ground_truth", "string", "JSON for action rows (canonical action, bbox, formatted answer), else null"),
    ("weight", "float64", "curation's sampling weight (upsampled hard queries > 1)"),
    ("provenance", "string", "JSON: episode, steps, critics and models behind the sample"),
)


_ARROW = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}
# The arrow type of `datasets.Image`: `datasets` only applies a feature from the file's metadata
# when the column's type is exactly the feature's own (polars would write large_list/large_binary).
_IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def write_hf_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """Write hf rows with the schema and `huggingface` metadata that make `datasets` (and the Hub
    viewer) read `images` as a list of `Image` and every other column as its declared dtype."""
    features = {
        name: {"feature": {"_type": "Image"}, "_type": "List"}
        if dtype == "images"
        else {"dtype": dtype, "_type": "Value"}
        for name, dtype, _ in HF_COLUMNS
    }
    schema = pa.schema(
        [(name, pa.list_(_IMAGE) if dtype == "images" else _ARROW[dtype]) for name, dtype, _ in HF_COLUMNS],
        metadata={"huggingface": json.dumps({"info": {"features": features}})},
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def dataset_card(man: Manifest, action_format: str, splits: list[str]) -> str:
    """A Hugging Face dataset card: features, columns, coordinates, action format, sizes, lineage, filters."""
    features = [
        f"  - name: {name}\n    list: image" if dtype == "images" else f"  - name: {name}\n    dtype: {dtype}"
        for name, dtype, _ in HF_COLUMNS
    ]
    lines = [
        "---",
        "configs:",
        "- config_name: default",
        "  data_files:",
        *(f"  - split: {s}\n    path: data/{s}-*.parquet" for s in splits),
        "dataset_info:",
        "  features:",
        *features,
        "tags: [gui-agent, trajforge]",
        "---",
        f"# {man.dataset} v{man.version}",
        "",
        f"GUI-agent training data published by trajforge. Manifest format `{man.format}`, "
        f"config hash `{man.config_hash[:16]}`.",
        "",
        "## Columns",
        *(f"- `{name}`: {what}" for name, _, what in HF_COLUMNS),
        "",
        "## Action format and coordinates",
        f"Answers to action rows are in the `{action_format}` format; the `system` column states its "
        "action space; knowledge rows (questions about the screen, answered in prose) carry "
        f"{KNOWLEDGE_SYSTEM!r} and no action contract. Coordinates are {_coordinates(action_format)}. "
        "`ground_truth.action` is the same action in trajforge's canonical form (0-1000) and "
        "`ground_truth.bbox` the target element's box (0-1000), which `trajforge/rewards.py` scores against.",
        "",
        "## Size",
        *(f"- {split}: {n} samples" for split, n in sorted(man.splits.items())),
        "",
        "## Composition",
        *(f"- {cat}: {n}" for cat, n in sorted(man.categories.items())),
        "",
        *_lineage_lines(man),
        "",
        "## Filters",
        "```json",
        json.dumps(man.config, indent=2, sort_keys=True),
        "```",
        "",
    ]
    return "\n".join(lines)


def _coordinates(action_format: str) -> str:
    """How an action format's coordinates are given, in words."""
    budget = BUDGETS.get(action_format)
    if budget:
        return (
            f"pixels of the image after Qwen2.5-VL `smart_resize` (multiples of 28, {budget.min_pixels}-"
            f"{budget.max_pixels} pixels); `ground_truth.coordinate_screen` gives that size per row"
        )
    return (
        "relative, 0-1000 on each axis, (0, 0) top-left"
        if action_format != "androidworld"
        else "pixels of the screenshot"
    )


def _lineage_lines(man: Manifest) -> list[str]:
    lineage = man.lineage
    return [
        "## Lineage",
        f"- rounds: {', '.join(map(str, lineage.rounds)) or 'none'}",
        *(f"- round {p.round}: policy {p.policy} v{p.version}" for p in lineage.policies),
        f"- critics: {', '.join(lineage.critics) or 'none'}",
        *(
            f"- round {x['round']} sampling: temperature {x['temperature']}, top_p {x['top_p']}"
            + (f", model family {x['family']}" if "family" in x else "")
            + f" ({x['episodes']} episodes)"
            for x in lineage.sampling or []
        ),
        f"- parent: {('v' + str(man.parent.version)) if man.parent else 'none'}",
    ]


# The modules `trajforge/rewards.py` runs on (they need only pydantic): an rl-verl export copies
# them beside its parquet, so a trainer loads the reward without installing trajforge and its pins.
REWARD_MODULES = (
    "__init__.py",
    "errors.py",
    "rewards.py",
    "actions/__init__.py",
    "actions/model.py",
    "actions/agentcpm.py",
    "actions/androidworld.py",
    "actions/computer.py",
    "actions/pyautogui.py",
    "actions/qwen.py",
    "actions/uitars.py",
)
REWARD_ENTRY = '''"""trajforge's rule rewards for this export, loadable without trajforge installed.

verl: reward.custom_reward_function.path=<this file> reward.custom_reward_function.name=compute_score
(+reward.custom_reward_function.reward_kwargs.scheme=binary|dense|mobiler1). It needs only pydantic
(>= 2); the code it runs is the copy in `reward_lib/trajforge/`, written by the export that wrote this file.
"""

import sys
from pathlib import Path

_LIB = str(Path(__file__).resolve().parent / "reward_lib")
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from trajforge.rewards import SCHEMES, compute_score  # noqa: E402

__all__ = ["SCHEMES", "compute_score"]
'''


def write_reward(root: Path) -> None:
    """`reward.py` and the modules it runs on, beside an rl-verl export's parquet."""
    package = Path(trajforge.__file__).resolve().parent
    for name in REWARD_MODULES:
        dest = root / "reward_lib" / "trajforge" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes((package / name).read_bytes())
    (root / "reward.py").write_text(REWARD_ENTRY, encoding="utf-8")
