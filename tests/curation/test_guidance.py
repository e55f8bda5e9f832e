"""Query-specific guidance (GUI-Owl §6.4): model descriptions with quality control, and the replay reference."""

from __future__ import annotations

import asyncio
import dataclasses
import json

from curation.guidance import describe_offline, describe_with_model, pick_reference, summarise_with_model
from curation.rollouts import Rollout
from rollout.sim.env import demonstrator
from storage.keys import blob_key
from storage.objectstore import frame_reader
from tests.support.scripted_llm import Recorded, Reply, ScriptedLLM
from trajforge.gateway import LLMGateway
from trajforge.settings import LLMSettings

from .conftest import APPS, sample_queries


def with_thoughts(views):
    """The replayed steps as a model-made trajectory: each action carries its rationale."""
    return [
        dataclasses.replace(v, action={**(v.action or {}), "thought": f"reason {i}"})
        for i, v in enumerate(views)
    ]


def responder(rec: Recorded) -> Reply:
    if "Summarise the essential steps" in rec.text:
        return Reply(content="1. Open Takeout.\n2. Search for the dish.")
    if "reason 1" in rec.text:
        return Reply(content=json.dumps({"outcome": "opened the wrong tab", "as_intended": False}))
    if "reason 2" in rec.text:
        return Reply(content="the search box opened")  # not JSON: recorded with a reason
    return Reply(content=json.dumps({"outcome": "did what it meant to", "as_intended": True}))


def test_model_descriptions_drop_steps_that_missed_their_intent(replayed) -> None:
    store, runs = replayed
    query = sample_queries("takeout", 3)[0]
    views = with_thoughts(runs[0][:4])
    with ScriptedLLM(responder=responder) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="vlm"))

        async def go():
            steps = await describe_with_model(query, views, True, gateway, frame_reader(store))
            return steps, (await summarise_with_model(query, steps, gateway))[0]

        steps, text = asyncio.run(go())
        describes = [r for r in llm.requests if "describe what one action" in r.text]
        summary = next(r for r in llm.requests if "Summarise the essential steps" in r.text)
    assert [(s.kept, s.reason) for s in steps] == [
        (True, None),
        (False, "outcome_not_intended"),
        (False, "unparseable_description"),
        (True, None),
    ]
    assert all(r.images == 2 for r in describes)  # before with the point circled, and after
    assert "did what it meant to" in summary.text and "opened the wrong tab" not in summary.text
    assert text.startswith("1. Open Takeout.")


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
