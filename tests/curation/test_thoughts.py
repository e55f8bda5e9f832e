"""Thought synthesis by hint-guided rejection sampling, against the scripted model server."""

from __future__ import annotations

import asyncio
import json
import re

from curation.rollouts import Rollout
from curation.thoughts import STYLES, StepAt, action_of, read_action, synthesise, template_thought, view_of
from storage.objectstore import frame_reader
from tests.support.scripted_llm import Recorded, Reply, ScriptedLLM
from trajforge.gateway import LLMGateway
from trajforge.settings import LLMSettings

from .conftest import sample_queries


def steps_of(replayed) -> list[StepAt]:
    """The first three steps of a replayed rollout, each by its rollout and index."""
    _, runs = replayed
    query = sample_queries("takeout", 3)[0]
    rollout = Rollout(1, "ep-1", query, runs[0][:3], ["GOOD"] * 3, True)
    return [(rollout, i) for i in range(3)]


def step_asked(text: str) -> int:
    """Which step a prompt is about: how many steps its history lists ("Steps taken so far")."""
    done = re.search(r"Steps taken so far: (.*)", text)
    assert done, text
    return 0 if done[1] == "none" else done[1].count("; ") + 1


def scripted(steps: list[StepAt]):
    """Step 0 matches on the second style, step 1 only when hinted, step 2 never (once unparseable)."""
    style_of = {text: name for name, text in STYLES.items()}

    def responder(rec: Recorded) -> Reply:
        if "Give the single next action" in rec.text:  # reasoning-bottleneck selection
            return bottleneck(steps, rec)
        if "Write only your reasoning" in rec.text:
            step = step_asked(rec.text)
            style = next(name for text, name in style_of.items() if text in rec.text)
            hinted = "The correct next action is" in rec.text
            return Reply(content=f"[step={step} style={style} hinted={hinted}] I should open the next thing.")
        marker = re.search(r"\[step=(\d) style=(\w+) hinted=(\w+)\]", rec.text)
        assert marker, rec.text
        step, style, hinted = int(marker[1]), marker[2], marker[3] == "True"
        gold = action_of(steps[step]).model_dump(mode="json", exclude_none=True)
        wrong = {"kind": "press", "key": "back"}
        if step == 2 and style == "observe_then_act":
            return Reply(content="I would tap it")  # malformed: recorded, not raised
        right = (step == 0 and style == "concise") or (step == 1 and hinted)
        return Reply(content=json.dumps(gold if right else wrong))

    return responder


def bottleneck(steps: list[StepAt], rec: Recorded) -> Reply:
    """Step 0 is solved from the task alone; step 1 only with its sub-goal; step 2 not even then."""
    step = step_asked(rec.text)
    gold = action_of(steps[step]).model_dump(mode="json", exclude_none=True)
    told = "The next step to take:" in rec.text
    right = step == 0 or (step == 1 and told)
    return Reply(content=json.dumps(gold if right else {"kind": "press", "key": "home"}))


def _synthesise(replayed, steps: list[StepAt], styles: list[str], **options):
    """`synthesise` against the scripted model: (drafts, report, the requests it received)."""
    store, _ = replayed
    with ScriptedLLM(responder=scripted(steps)) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="thinker"))
        drafts, report = asyncio.run(synthesise(steps, styles, 40, gateway, frame_reader(store), **options))
        return drafts, report, list(llm.requests)


def test_only_thoughts_that_predict_the_recorded_action_are_kept(replayed) -> None:
    steps = steps_of(replayed)
    drafts, report, requests = _synthesise(replayed, steps, ["cot", "concise", "observe_then_act"])
    predictions = [r for r in requests if "Give the single action" in r.text]
    first, second, third = drafts
    assert (
        first.reason is None and first.provenance["pass"] == "free" and first.provenance["style"] == "concise"
    )
    assert "style=concise" in first.payload["thought"]
    assert [a["result"] for a in first.provenance["attempts"]] == ["kind_mismatch", "match"]
    assert second.reason is None and second.provenance["pass"] == "hinted"
    assert second.payload["response"].startswith("<think>[step=1 style=cot hinted=True]")
    assert third.reason == "thought_action_mismatch" and third.provenance["pass"] is None
    assert [a["result"] for a in third.provenance["attempts"]] == [
        "kind_mismatch",
        "kind_mismatch",
        "prediction_unparseable",
        "kind_mismatch",
    ]
    assert report.kept == {"free": 1, "hinted": 1} and report.dropped == {"thought_action_mismatch": 1}
    # the predictor sees the reasoning and the screen, never the task or the history
    assert predictions and all(r.images == 1 and "Steps taken so far" not in r.text for r in predictions)
    assert all(steps[0][0].query.instruction not in r.text for r in predictions)
    assert first.payload["action"] == action_of(steps[0]).model_dump(mode="json", exclude_none=True)
    # Each thought sample carries its step's reasoning-bottleneck verdict (InfiGUI-R1 §3.1.1).
    verdicts = [d.provenance["bottleneck"]["verdict"] for d in drafts]
    assert verdicts == ["solved_without_subgoal", "reasoning_bottleneck", "wrong_with_subgoal"]
    assert [d.payload["bottleneck"] for d in drafts] == [False, True, False]
    assert report.bottleneck == dict.fromkeys(verdicts, 1)


def test_only_reasoning_bottlenecks_get_thoughts_when_asked(replayed) -> None:
    steps = steps_of(replayed)
    drafts, report, requests = _synthesise(replayed, steps, ["cot"], only_bottlenecks=True)
    asked = [step_asked(r.text) for r in requests if "Write only your reasoning" in r.text]
    subgoals = [r for r in requests if "The next step to take:" in r.text]
    assert set(asked) == {1}  # thoughts were written for the bottleneck step only
    assert len(subgoals) == 2  # a_low is asked only where a_high was wrong
    assert [d.reason for d in drafts] == ["solved_without_subgoal", None, "wrong_with_subgoal"]
    assert drafts[1].provenance["bottleneck"] == {
        "verdict": "reasoning_bottleneck",
        "without_subgoal": "kind_mismatch",
        "with_subgoal": "match",
    }
    assert report.dropped == {"solved_without_subgoal": 1, "wrong_with_subgoal": 1}


def test_offline_thoughts_are_checked_by_reading_the_action_back(replayed) -> None:
    steps = steps_of(replayed)
    for step in steps:
        for style in STYLES:
            predicted = read_action(template_thought(step, style), view_of(step))
            assert predicted is not None and predicted.kind == action_of(step).kind
    drafts, report = asyncio.run(synthesise(steps, list(STYLES), 40))
    assert all(d.reason is None and d.provenance["pass"] == "template" for d in drafts)
    assert report.kept == {"template": 3}
