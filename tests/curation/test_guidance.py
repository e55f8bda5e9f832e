"""Query-specific guidance (GUI-Owl §6.4): model descriptions with quality control, and the replay reference."""

from __future__ import annotations

import asyncio
import dataclasses
import json

from curation.guidance import describe_offline, guide_with_model, pick_reference
from curation.rollouts import Rollout
from rollout.sim.env import demonstrator
from storage.keys import blob_key
from storage.objectstore import frame_reader
from tests.support.scripted_llm import Recorded, Reply, ScriptedLLM
from trajforge.gateway import LLMGateway, closing
from trajforge.settings import LLMSettings

from .conftest import APPS, sample_queries


def with_thoughts(views):
    """The replayed steps as a model-made trajectory: each action carries its rationale."""
    return [
        dataclasses.replace(v, action={**(v.action or {}), "thought": f"reason {i}"})
        for i, v in enumerate(views)
    ]


def responder(rec: Recorded) -> Reply:
    """One reply for the reference: step 2 missed its intent, step 3 has no outcome, the guidance."""
    steps = [
        {"step": 1, "outcome": "did what it meant to", "as_intended": True},
        {"step": 2, "outcome": "opened the wrong tab", "as_intended": False},
        {"step": 4, "outcome": "did what it meant to", "as_intended": True},
    ]
    return Reply(
        content=json.dumps({"steps": steps, "guidance": "1. Open Takeout.\n2. Search for the dish."})
    )


def test_one_request_describes_the_reference_and_writes_its_guidance(replayed) -> None:
    store, runs = replayed
    query = sample_queries("takeout", 3)[0]
    views = with_thoughts(runs[0][:4])
    with ScriptedLLM(responder=responder) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="vlm"))
        steps, text, why = asyncio.run(
            closing(gateway, guide_with_model(query, views, True, gateway, frame_reader(store)))
        )
    assert [(s.kept, s.reason) for s in steps] == [
        (True, None),
        (False, "outcome_not_intended"),
        (False, "unparseable_description"),
        (True, None),
    ]
    # one request: each step's screen before it, point circled, then the screen after the last
    assert len(llm.requests) == 1 and llm.requests[0].images == len(views) + 1
    assert "reason 1" in llm.requests[0].text  # the agent's stated reasons are shown
    assert text.startswith("1. Open Takeout.") and why == ""


def test_a_reply_without_guidance_says_why(replayed) -> None:
    store, runs = replayed
    query = sample_queries("takeout", 3)[0]
    with ScriptedLLM(default=Reply(content="not json")) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="vlm"))
        steps, text, why = asyncio.run(
            closing(gateway, guide_with_model(query, runs[0][:2], False, gateway, frame_reader(store)))
        )
    assert text == "" and why.startswith("invalid_json") and all(s.reason for s in steps)


def test_a_query_nobody_solved_gets_its_ground_truth_path_replayed(replayed) -> None:
    store, runs = replayed
    query = sample_queries("takeout", 3)[0]
    failed = Rollout(1, "ep-failed", query, runs[0][:2], ["GOOD", "HARMFUL"], False)
    picked = pick_reference([failed], demonstrator(APPS, store))
    assert picked is not None
    ref, views, labels = picked
    assert ref == "replay" and labels is None and len(views) == len(runs[0])
    assert [v.action for v in views] == [v.action for v in runs[0]]
    assert all(store.exists(blob_key(v.after)) for v in views)
    described = describe_offline(views, None)
    assert all(s.kept for s in described)  # a demonstration is not second-guessed


def test_offline_quality_control_of_a_model_made_reference(replayed) -> None:
    _, runs = replayed
    views = runs[0][:3]
    steps = describe_offline(views, ["GOOD", "HARMFUL", "GOOD"])
    assert [(s.kept, s.reason) for s in steps] == [
        (True, None),
        (False, "outcome_not_intended"),
        (True, None),
    ]
