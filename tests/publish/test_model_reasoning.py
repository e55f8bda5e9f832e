"""Train on what the model served: a family's rollout in which the model reasons (UI-TARS-1.5's
`Thought:`, GUI-Owl's `<thinking>` and `<conclusion>`, AgentCPM-GUI's `thought`) is judged,
curated, published and exported as that family, and each action row's answer carries the model's
own words in the family's format, where its prompt asks for them; the history turns carry them too.

The model is scripted: the oracle chooses each move, the scripted endpoint answers it in the
family's format with reasoning of its own, and the family's rollout (`VLMPolicy`) sends the real
request and parses the reply, as against a served checkpoint.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from critics.stages import CALIBRATE, JUDGE
from curation.stages import CURATE
from evolve.lifecycle import close_round, open_round
from evolve.spine import new_spine
from evolve.stages import run_stage
from publish.card import card_lines, trajforge_version
from publish.exports import export
from publish.versions import PublishConfig, publish
from querygen.pipeline import generate_queries, store_generation
from rollout.loop import play
from rollout.policies import NoisyOracle, OracleNoise, VLMPolicy, VLMPolicyConfig
from rollout.policies.base import PolicyOutput, observed
from rollout.pool import DevicePool
from rollout.runner import RolloutConfig
from rollout.sim.farm import SimFarm
from rollout.stages import ROLLOUT, rolled
from storage.datasets import iter_rows, manifest
from storage.db import transaction
from storage.keys import blob_key
from storage.llm_cache import SqlResponseCache
from storage.policies import register_policy
from storage.rounds import record
from tests.flows.test_cli import cli
from tests.publish.test_trainer_formats import check_answer
from tests.support.scripted_llm import Reply, ScriptedLLM
from trajforge.actions import get_codec
from trajforge.actions.space import conform
from trajforge.appspec import load_app
from trajforge.domain import Observation, Query, StepView, describe
from trajforge.families import PROMPT_VERSION, get_family
from trajforge.gateway import LLMGateway
from trajforge.settings import LLMSettings, load_settings


class ReasoningModel:
    """A policy whose every step is a real family request answered by a scripted model that reasons:
    the oracle picks the move, the model's reply says it in the family's format with the reasoning
    its prompt asks for (a thought, GUI-Owl's conclusion too), naming the element it acts on."""

    def __init__(
        self, family: str, llm: ScriptedLLM, gateway: LLMGateway, frames: Any, says: tuple[str, ...] | None
    ) -> None:
        self.family = get_family(family)
        self.codec = get_codec(self.family.action_format)
        self.oracle = NoisyOracle(OracleNoise(mis_tap=0, wrong_value=0, premature_terminate=0, malformed=0))
        config = VLMPolicyConfig(name=f"vlm-{family}", model=family, family=family)
        self.vlm = VLMPolicy(config, gateway, frames)
        self.name, self.version = self.vlm.name, 0
        self.llm, self.said = llm, 0
        self.says = self.family.asks if says is None else says  # the notes it answers with

    def start(self, query: Query, seed: str, guidance: str | None = None, rollout: int = 0) -> None:
        self.oracle.start(query, seed, guidance, rollout)
        self.vlm.start(query, seed, guidance, rollout)

    async def act(self, observation: Observation) -> PolicyOutput:
        chosen = await self.oracle.act(observation)
        action = get_codec(chosen.format).parse(chosen.text, observed(observation))
        sha = observation.screenshot
        view = StepView.of(
            action, None, sha, sha, observation.elements or [], observation.width, observation.height
        )
        words = describe(action, view)
        self.said += 1
        notes = {
            "thought": f"My own reasoning {self.said}: to get on, {words}.",
            "intent": f"I did: {words}.",
        }
        spoken = action.model_copy(update={n: notes[n] for n in self.says})
        screen = self.family.coordinate_screen(observation.width, observation.height)
        stated, how = conform(self.codec, spoken, screen)
        assert stated is not None, (how, spoken)
        self.llm.enqueue(Reply(content=self.codec.format(stated, screen)))
        return await self.vlm.act(observation)


def _reasoning_round(family: str, tmp_path: Path, says: tuple[str, ...] | None = None) -> tuple[Any, Any]:
    """One round of two settings queries, rolled out by the reasoning model, judged, curated and
    published as v1 of `gui`."""
    settings = load_settings()
    spine = new_spine(settings)
    farm = SimFarm(store=spine.store)
    pool = DevicePool(spine.sessions)
    farm.register(pool, 1)  # one device: the scripted replies are answered in order
    with transaction(spine.sessions) as s:
        policy_id = register_policy(s, f"vlm-{family}", 0)
        rnd = open_round(s, policy_id)
        round_id, number = rnd.id, rnd.number
    spec = load_app("settings")
    generated = generate_queries(spec, 6, seed=number)
    store_generation(spine.sessions, spec, generated, round_id=round_id)
    # UI-TARS-1.5 on a phone has no enter key: the queries that type into a field are left out
    typed = ("password", "search_box")
    queries = [q for q in generated.kept if not any(m.get("widget") in typed for m in q.path)][:2]
    with ScriptedLLM() as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model=family), SqlResponseCache(spine.sessions))

        def frames(sha: str) -> bytes:
            return spine.store.get(blob_key(sha))

        config = RolloutConfig(workers=1, max_steps=12, rollouts_per_query=2)
        report, _ = play(
            spine,
            farm,
            pool,
            round_id,
            policy_id,
            queries,
            lambda: ReasoningModel(family, llm, gateway, frames, says),
            config,
            backend=None,
            gateway_to_close=gateway,
        )
    assert report.successes >= 2, report.render()
    record(spine.sessions, number, ROLLOUT.name, rolled(report))  # the round's rollout, played here
    for stage in (JUDGE, CALIBRATE, CURATE):
        run_stage(spine, stage, number, {})
    close_round(spine, number, {})
    publish(spine.sessions, spine.store, "gui", PublishConfig(chunk_rows=32, val_fraction=0.3))
    return spine.sessions, spine.store


def _gui_owl_split(text: str) -> tuple[str, dict[str, Any], str]:
    """GUI-Owl's own reading of an answer (X-PLUG/MobileAgent `gui_owl.py`): the thinking, the call
    and the conclusion, each split out by the markers it looks for."""
    thinking = text.split("<thinking>\n")[1].split("\n</thinking>")[0]
    call = json.loads(text.split("<tool_call>\n")[1].split("}}\n")[0] + "}}")
    conclusion = text.split("<conclusion>\n")[1].split("\n</conclusion>")[0]
    return thinking, call, conclusion


@pytest.mark.parametrize("family", ["uitars15", "guiowl", "agentcpm", "qwen25vl", "mobiler1"])
def test_every_action_row_answers_with_the_models_own_reasoning_in_its_familys_format(
    family: str, tmp_path: Path
) -> None:
    sessions, store = _reasoning_round(family, tmp_path)
    out = tmp_path / "export"
    report = export(
        sessions, store, "gui", 1, "sft-sharegpt", str(out), trainer="none", weights="keep", family=family
    )
    records = [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]
    stored = {r["uid"]: r for r in iter_rows(store, manifest(sessions, store, "gui", 1))}
    acted = [r for r in records if json.loads(stored[r["meta"]["uid"]]["payload"]).get("action")]
    prompts = [stored[r["meta"]["uid"]]["prompt"] for r in acted]
    assert acted
    asks, own = get_family(family).asks, 0
    for exported in acted:
        answer = exported["messages"][-1]["content"]
        check_answer(
            {"uitars15": "uitars15", "agentcpm": "agentcpm", "mobiler1": "mobiler1"}.get(family, "qwen"),
            answer.split("\n<conclusion>")[0]
            .replace("<thinking>\n", "<think>")
            .replace("\n</thinking>", "</think>"),
            (1080, 2400),
        )
        if family == "uitars15":  # the prompt's `Thought: ...` line
            assert answer.startswith("Thought: ") and "\nAction: " in answer, answer
            own += "My own reasoning" in answer
        elif family == "guiowl":  # gui_owl.py splits on each of its markers: all three are there
            thinking, call, conclusion = _gui_owl_split(answer)
            assert call["name"] == "mobile_use"
            if "My own reasoning" in thinking:
                own += 1
                assert conclusion.startswith("I did: "), answer  # its own conclusion, not a template
        elif family == "mobiler1":  # its three parts, each the model's own
            assert answer.startswith("<think>My own reasoning") and "<action>I did: " in answer, answer
            own += 1
        elif family == "agentcpm":  # the schema in its system prompt requires the thought
            thought = json.loads(answer)["thought"]
            own += "My own reasoning" in thought
        else:  # Qwen2.5-VL's prompt asks for the call alone: no thought it never asked for
            assert "<think" not in answer and "My own reasoning" not in answer, answer
        for turn in exported["messages"][1:-1]:  # the history turns are the model's own, as it sent them
            if turn["role"] == "assistant" and "thought" in asks:
                assert "My own reasoning" in turn["content"], turn["content"]
    # every step was the model's: every action row says its own reasoning (the reasoning rows of
    # thought synthesis keep the policy's thought rather than write one)
    if "thought" in asks:
        assert own == len(acted), f"{own} of {len(acted)} rows carry the model's own reasoning"
    assert report.offline_thoughts == 0  # none written over what the model said
    # each action-prediction row is the request the rollout sent for its step, rendered again from
    # what was stored (instruction, earlier outputs verbatim, screenshot), turn for turn
    tasks = sum("Task: " in rows_prompt for rows_prompt in prompts)
    assert tasks and report.prompts_checked == tasks and report.prompt_mismatches == 0
    assert f"prompt check: {tasks} action rows compared with the request their rollout sent: 0 differ" in (
        report.render()
    )

    # the version's card pins how the rows were made; the export carries it with its own choices
    man = manifest(sessions, store, "gui", 1)
    card = "\n".join(card_lines(man))
    fam = get_family(family)
    assert f"family {family}: prompt {fam.source} ({PROMPT_VERSION}); answers in {fam.action_format}" in card
    space = fam.coordinate_screen(1080, 2400)
    assert f"coordinates 1080x2400 -> {space.width}x{space.height}" in card
    assert f"served models: policy {family}" in card and f"trajforge: {trajforge_version()}" in card
    marker = json.loads((out / ".trajforge-export.json").read_text())["card"]
    assert marker["made_with"] == man.lineage.made_with and marker["trainer"] is None
    assert marker["prompt_check"] == {"compared": tasks, "differ": 0}
    if family == "uitars15":  # the command prints the same card
        done = cli("datasets", "card", "1", "--dataset", "gui", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == card.splitlines()
        _verl_keeps_every_turn_as_sent(sessions, store, tmp_path / "verl")


def _verl_keeps_every_turn_as_sent(sessions: Any, store: Any, out: Path) -> None:
    """UI-TARS-1.5 sends its earlier outputs beyond the last four screenshots as assistant messages one
    after another: verl's rows keep them so, one output per turn, and still match the requests sent."""
    import polars as pl

    report = export(sessions, store, "gui", 1, "rl-verl", str(out), trainer="none", family="uitars15")
    assert report.prompts_checked and report.prompt_mismatches == 0
    prompts = pl.read_parquet(sorted(out.glob("*.parquet"))).get_column("prompt").to_list()
    turns = [t for p in prompts for t in p if t["role"] == "assistant"]
    assert turns and all(t["content"].count("Action: ") == 1 for t in turns)  # never two outputs in one


def test_verl_rows_keep_uitars_history_beyond_its_screenshots_one_output_a_turn() -> None:
    """Seven earlier steps: UI-TARS-1.5 sends the first three outputs as assistant messages in a row
    (their screenshots are past its five), then four (screenshot, output) pairs. verl's layout keeps
    that sequence; the SFT layout joins same-role turns for LLaMA-Factory's alternation."""
    from publish.export_family import joined
    from tests.trajforge.test_families import earlier_step
    from trajforge.actions import Screen

    history = [earlier_step(i, f"s{i}", f"Thought: step {i}\nAction: press_back()") for i in range(7)]
    sent = get_family("uitars15").messages(
        "Open Wi-Fi", Screen(1080, 2400), history, "now", lambda sha: {"type": "image", "sha": sha}
    )
    kept, images = joined(sent, alternate=False)
    assert [t["role"] for t in kept] == ["user", *["assistant"] * 3, *["user", "assistant"] * 4, "user"]
    assert all(t["content"].count("Action: ") == 1 for t in kept if t["role"] == "assistant")
    assert images == ["s3", "s4", "s5", "s6", "now"]
    alternating, same = joined(sent)
    assert same == images and not any(a["role"] == b["role"] for a, b in itertools.pairwise(alternating))


def test_a_thought_the_familys_prompt_never_asks_for_is_not_trained_on() -> None:
    """A Qwen2.5-VL checkpoint that thinks aloud anyway (`<think>` before its call): its prompt asks
    for the call alone, so the answers are written with the call alone, not verbatim."""
    sessions, store = _reasoning_round("qwen25vl", Path.cwd(), says=("thought",))
    out = Path.cwd() / "export"
    export(
        sessions, store, "gui", 1, "sft-sharegpt", str(out), trainer="none", weights="keep", family="qwen25vl"
    )
    answers = [
        json.loads(line)["messages"][-1]["content"]
        for f in sorted(out.glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    calls = [a for a in answers if "<tool_call>" in a]
    assert calls and not any("<think" in a or "My own reasoning" in a for a in calls)
