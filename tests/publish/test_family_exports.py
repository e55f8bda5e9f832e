"""Exports shaped by a model family: a checkpoint trained on them is rolled out exactly as it was trained.

For each family, every exported action row's answer, given back by a scripted model to that family's
rollout on the same screen, does the same thing (the same action, on the same element); and a row
without history is the very request the rollout sends, turn for turn.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from publish import exports
from publish.export_family import joined
from publish.exports import export
from rollout.policies import VLMPolicy, VLMPolicyConfig
from rollout.policies.base import PolicyOutput
from storage.keys import blob_key
from tests.support.scripted_llm import Reply, ScriptedLLM
from trajforge.actions import DESKTOP_FORMATS, Action, get_codec
from trajforge.actions.compare import mismatch
from trajforge.actions.space import KNOWLEDGE_SYSTEM
from trajforge.domain import Observation, Query
from trajforge.errors import ConfigError
from trajforge.families import FAMILY_NAMES, get_family
from trajforge.gateway import LLMGateway
from trajforge.settings import LLMSettings


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]


def _as_exported(body: dict[str, Any], placeholder: str | None) -> list[dict[str, str]]:
    """A request's messages in the export's layout (the images as tags, turns of one role joined)."""
    messages = [
        {
            "role": m["role"],
            "content": m["content"]
            if isinstance(m["content"], str)
            else [
                {"type": "image", "sha": ""}
                if p["type"] == "image_url"
                else {"type": "text", "text": p["text"]}
                for p in m["content"]
            ],
        }
        for m in body["messages"]
    ]
    return joined(messages, placeholder)[0]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the exports' own tests cover PostgreSQL
def test_every_familys_export_rolls_out_as_it_was_trained(
    version, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One published version (a smoke round), exported as each family in turn. Its episodes are a
    phone's, which a desktop family's export refuses (`test_exports`); for those families the apps'
    device is left unknown, as a suite that does not say its own, so their machinery is read the same way."""
    for family_name in FAMILY_NAMES:
        if get_family(family_name).action_format in DESKTOP_FORMATS:
            monkeypatch.setattr(exports, "round_devices", lambda *_: {})
        _round_trip(version, tmp_path, family_name)
    _verl_prompts(version, tmp_path)
    _refusals(version, tmp_path)


def _round_trip(version: Any, tmp_path: Path, family_name: str) -> None:
    _, sessions, store, rows = version
    family = get_family(family_name)
    out = tmp_path / family_name
    report = export(
        sessions,
        store,
        "gui",
        1,
        "sft-sharegpt",
        str(out),
        trainer="none",
        weights="keep",
        family=family_name,
    )
    records = _records(out)
    acted = [r for r in records if json.loads(rows[r["meta"]["uid"]]["payload"]).get("action")]
    for record in records:  # a question about the screen keeps its own prompt, with no action contract
        if record not in acted:
            assert record["messages"][0] == {"role": "system", "content": KNOWLEDGE_SYSTEM}
    assert acted and len(acted) < len(records)
    assert any(f"action rows are {family_name}'s conversation" in n for n in report.notes)
    if family_name == "uitars15":  # the built-in policy's Press enter: no action of UI-TARS's phone space
        assert any("cannot state are not in the history" in n and "press" in n for n in report.notes), (
            report.notes
        )
    for record in acted:
        chat = record["messages"]
        assert [m["role"] for m in chat[-2:]] == ["user", "assistant"]
        assert sum(m["content"].count("<image>") for m in chat) == len(record["images"]) >= 1
        roles = [m["role"] for m in chat if m["role"] != "system"]
        assert all(a != b for a, b in itertools.pairwise(roles))  # the layout alternates
    with ScriptedLLM() as llm:
        outputs = asyncio.run(_roll_out(llm, family_name, acted, rows, store))
    codec, hits, same_request, with_history = get_codec(family.action_format), 0, 0, 0
    for record, request, out_ in zip(acted, llm.requests, outputs, strict=True):
        chat, payload = record["messages"], json.loads(rows[record["meta"]["uid"]]["payload"])
        assert out_.screen is not None
        parsed = codec.parse(out_.text, out_.screen).core()
        target = Action.model_validate(payload["action"]).core()
        bbox = payload.get("bbox")
        hits += mismatch(parsed, target, [], out_.screen, 4) is None and (
            bbox is None or parsed.point is None or _inside(parsed.point, bbox)
        )
        if len(record["images"]) == 1 and record["meta"]["category"] == "intent_execution":
            same_request += _as_exported(request.body, family.image_placeholder) == chat[:-1]
        with_history += any(m["role"] == "assistant" for m in chat[:-1]) or "Step 1: " in chat[-2]["content"]
    assert hits == len(acted), f"{hits}/{len(acted)} answers did the same thing on the same screen"
    assert same_request > 0  # an instruction row is the rollout's own request, turn for turn
    if family_name not in ("agentcpm", "qwen25vl-computer"):  # their requests are one turn, with no history
        assert with_history > 0  # a later step's row carries the earlier steps, as the family sends them


async def _roll_out(
    llm: ScriptedLLM, family: str, records: list[dict[str, Any]], rows: dict[str, Any], store: Any
) -> list[PolicyOutput]:
    """Each record's step rolled out through the family on its own screen, the model answering the
    record's exported answer: the policy's outputs, in order."""
    gateway = LLMGateway(LLMSettings(base_url=llm.url, model=family))
    outputs = []
    for record in records:
        row = rows[record["meta"]["uid"]]
        fields = dict(line.split(": ", 1) for line in row["prompt"].splitlines() if ": " in line)
        width, height = json.loads(row["payload"])["screen"]
        llm.enqueue(Reply(content=record["messages"][-1]["content"]))
        config = VLMPolicyConfig(name="vlm", model=family, family=family)
        policy = VLMPolicy(config, gateway, lambda sha: store.get(blob_key(sha)))
        policy.start(
            Query(uid="q", app="a", instruction=fields.get("Task") or fields["Instruction"]), seed="s"
        )
        shown = Observation(screenshot=row["images"][-1], width=width, height=height)
        outputs.append(await policy.act(shown))
    await gateway.aclose()
    return outputs


def _inside(point: tuple[int, int], bbox: list[int]) -> bool:
    x1, y1, x2, y2 = bbox
    return x1 - 2 <= point[0] <= x2 + 2 and y1 - 2 <= point[1] <= y2 + 2


def _verl_prompts(version: Any, tmp_path: Path) -> None:
    """An rl-verl export prompts with the family's conversation; its ground truth names the family."""
    _, sessions, store, _ = version
    export(sessions, store, "gui", 1, "rl-verl", str(tmp_path / "verl"), family="uitars15")
    frame = pl.read_parquet(tmp_path / "verl" / "train.parquet")
    kinds: Counter[int] = Counter()
    for prompt, images, reward in zip(frame["prompt"], frame["images"], frame["reward_model"], strict=True):
        assert prompt[0]["role"] == "user" and prompt[0]["content"].startswith("You are a GUI agent.")
        assert sum(m["content"].count("<image>") for m in prompt) == len(images)
        truth = json.loads(reward["ground_truth"])
        assert truth["family"] == "uitars15" and truth["action_format"] == "uitars15"
        kinds[len(images)] += 1
    assert max(kinds) > 1  # later steps carry earlier screenshots


def _refusals(version: Any, tmp_path: Path) -> None:
    _, sessions, store, _ = version
    with pytest.raises(ConfigError, match="leave --action-format out"):
        export(sessions, store, "gui", 1, "sft-sharegpt", str(tmp_path / "a"), "qwen", family="uitars15")
    with pytest.raises(ConfigError, match="export sft-sharegpt, sft-messages or rl-verl with --family"):
        export(sessions, store, "gui", 1, "hf", str(tmp_path / "b"), family="qwen25vl")
    with pytest.raises(ConfigError, match="unknown model family"):
        export(sessions, store, "gui", 1, "sft-sharegpt", str(tmp_path / "c"), family="llava")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
