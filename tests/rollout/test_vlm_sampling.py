"""The VLM policy on the model path: K rollouts of a query are sampled (greedy first, then
seeded temperature/top_p per episode), and earlier steps reach the prompt as actions in words
with the model's own conclusion."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from pathlib import Path

from PIL import Image
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from querygen.pipeline import generate_queries, store_generation
from rollout.policies import VLMPolicy, VLMPolicyConfig
from rollout.policies.vlm import history_line
from rollout.pool import DevicePool
from rollout.runner import EpisodeRunner, RolloutConfig
from rollout.sim.farm import SimFarm
from storage.keys import blob_key
from storage.llm_cache import SqlResponseCache
from storage.models import Episode, Round, Step
from storage.objectstore import LocalObjectStore
from storage.rounds import sampling_by_round
from tests.support.scripted_llm import Recorded, Reply, ScriptedLLM
from tests.support.spine import new_round
from trajforge.appspec import load_app
from trajforge.domain import Observation, Query
from trajforge.gateway import LLMGateway
from trajforge.settings import LLMSettings, PolicySettings

SCREEN = Observation(
    screenshot="0" * 64,
    width=1080,
    height=2400,
    elements=[
        {"text": "Wi-Fi", "bounds": [0, 400, 1080, 600]},
        {"text": "Bluetooth", "bounds": [0, 600, 1080, 800]},
    ],
)
TAP_WIFI = (
    '<tool_call>{"name":"mobile_use","arguments":{"action":"click","coordinate":[540,500]}}</tool_call>'
)
CHOICES = [(540, 500), (540, 700), (540, 900), (540, 1100), (540, 1300)]


def test_history_is_the_action_in_words_with_the_models_conclusion() -> None:
    thinking = (
        f"<thinking>The Wi-Fi row is there.</thinking>\n{TAP_WIFI}\n<conclusion>Opened Wi-Fi.</conclusion>"
    )
    assert history_line(thinking, "qwen", SCREEN, "conclusion") == "Tap 'Wi-Fi'. Opened Wi-Fi."
    assert history_line(thinking, "qwen", SCREEN, "actions") == "Tap 'Wi-Fi'"
    assert history_line(f"{TAP_WIFI}\nConclusion: on the Wi-Fi page", "qwen", SCREEN, "conclusion") == (
        "Tap 'Wi-Fi'. on the Wi-Fi page"
    )
    r1 = f"<think>long reasoning</think>\n<action>Open the Bluetooth settings</action>\n{TAP_WIFI}"
    assert history_line(r1, "mobiler1", SCREEN, "conclusion") == "Tap 'Wi-Fi'. Open the Bluetooth settings"
    assert history_line("I think I should tap", "qwen", SCREEN, "conclusion").startswith(
        "(the output could not be parsed: "
    )
    long = "<thinking>" + "x" * 1000 + "</thinking>" + TAP_WIFI
    assert len(history_line(long, "qwen", SCREEN, "raw")) == 300  # the old behaviour, on request


def test_policy_settings_reach_the_config() -> None:
    config = VLMPolicyConfig.from_settings(PolicySettings(temperature=1.1, history="actions"), model="m")
    assert (config.temperature, config.history, config.model) == (1.1, "actions", "m")
    first, again, other = config.sampling(0, "e1"), config.sampling(1, "e1"), config.sampling(1, "e2")
    assert (first.temperature, first.seed) == (0.0, None)
    assert again == config.sampling(1, "e1") and again.seed != other.seed  # reproducible, per episode


def _sampling_model(rec: Recorded) -> Reply:
    """A stand-in for a sampling model: greedy requests get the same answer; sampled ones draw
    from (seed, step) what a model at that temperature might do."""
    step = rec.text.count("Step ")
    if step >= 3:
        return Reply(
            content='<tool_call>{"name":"mobile_use","arguments":{"action":"terminate","status":"failure"}}</tool_call>'
        )
    if rec.body.get("temperature", 0) == 0:
        x, y = CHOICES[0]
    else:
        digest = hashlib.sha256(f"{rec.body['seed']}:{step}".encode()).digest()
        x, y = CHOICES[digest[0] % len(CHOICES)]
    call = {"name": "mobile_use", "arguments": {"action": "click", "coordinate": [x, y]}}
    return Reply(
        content=f"<tool_call>{json.dumps(call)}</tool_call>\n<conclusion>step {step} done</conclusion>"
    )


def test_k_rollouts_of_a_query_are_diverse_and_record_their_sampling(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    spec = load_app("settings")
    generated = generate_queries(spec, 4, seed=5)
    store_generation(sessions, spec, generated)
    round_id, policy_id = new_round(sessions, policy="vlm")
    store = LocalObjectStore(tmp_path / "objects")
    farm = SimFarm(store=store)
    pool = DevicePool(sessions)
    farm.register(pool, 2)
    with ScriptedLLM(responder=_sampling_model) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="gui-owl"))
        config = VLMPolicyConfig.from_settings(PolicySettings())

        def policy() -> VLMPolicy:
            return VLMPolicy(config, gateway, lambda sha: store.get(blob_key(sha)))

        runner = EpisodeRunner(sessions, pool, farm, policy, RolloutConfig(rollouts_per_query=4, workers=2))
        report = asyncio.run(runner.run(generated.kept, round_id, policy_id))
        prompts = [r.text for r in llm.requests]
    assert report.completed == 4 * len(generated.kept)
    with sessions() as s:
        episodes = s.scalars(select(Episode)).all()
        actions = {
            e.id: tuple(
                json.dumps(st.action.stored() if st.action else None, sort_keys=True)
                for st in s.scalars(select(Step).where(Step.episode_id == e.id).order_by(Step.index))
            )
            for e in episodes
        }
    by_query: dict[int, set[tuple[str, ...]]] = {}
    for e in episodes:
        by_query.setdefault(e.query_id, set()).add(actions[e.id])
    distinct = sum(len(v) for v in by_query.values()) / len(by_query)
    assert distinct >= 3, by_query  # K = 4 rollouts: at least 3 different action sequences on average
    sampled = [e.meta["sampling"] for e in episodes if e.attempt > 0]
    assert all(m["temperature"] == 0.8 and m["top_p"] == 0.95 and m["seed"] is not None for m in sampled)
    assert len({m["seed"] for m in sampled}) == len(sampled)
    assert any("Step 1: Tap" in p and "step 0 done" in p for p in prompts)  # history in words + conclusion
    with sessions() as s:
        number = s.scalars(select(Round.number).where(Round.id == round_id)).one()
    n = len(generated.kept)  # what a dataset version's lineage (and its card) says about sampling
    assert sampling_by_round(sessions, [number]) == [
        {"round": number, "temperature": 0.0, "top_p": None, "episodes": n},
        {"round": number, "temperature": 0.8, "top_p": 0.95, "episodes": 3 * n},
    ]


def test_each_screenshot_is_read_once_however_long_it_stays_in_the_window(scripted_llm: ScriptedLLM) -> None:
    reads: list[str] = []

    def frames(sha: str) -> bytes:
        reads.append(sha)
        return b"\x89PNG fake " + sha.encode()

    scripted_llm.enqueue(*[Reply(content=TAP_WIFI)] * 4)
    gateway = LLMGateway(LLMSettings(base_url=scripted_llm.url, model="m"))
    policy = VLMPolicy(VLMPolicyConfig(history_images=3), gateway, frames)
    query = Query(uid="q", app="settings", instruction="Open Wi-Fi", path=[], goal={})

    async def play() -> None:
        policy.start(query, seed="e", rollout=0)
        for sha in ("a" * 64, "b" * 64, "b" * 64, "c" * 64):
            await policy.act(SCREEN.model_copy(update={"screenshot": sha}))
        await gateway.aclose()

    asyncio.run(play())
    assert reads == ["a" * 64, "b" * 64, "c" * 64]  # encoded once each, though sent up to three times
    assert [r.images for r in scripted_llm.requests] == [1, 2, 3, 3]  # the window, repeats included


def test_a_sampled_request_sent_again_in_an_episode_draws_again_and_a_rerun_repeats_it(
    sessions: sessionmaker[Session],
) -> None:
    """AgentCPM-GUI sends no history: after a reply that did nothing, the next request is the same.
    Sampled, it goes with the next seed, so neither the cache nor the seed repeats the bad reply; a
    rerun of the episode sends the same two requests and the cache answers both."""
    config = VLMPolicyConfig(family="agentcpm", greedy_first=True)
    first_seed = config.sampling(1, "e").seed
    assert first_seed is not None
    png = io.BytesIO()
    Image.new("RGB", (SCREEN.width, SCREEN.height), "white").save(png, format="PNG")

    def model(rec: Recorded) -> Reply:  # the episode's seed drew a malformed reply; the next draws a tap
        if rec.body["seed"] == first_seed:
            return Reply(content="I will tap the button")
        return Reply(content=json.dumps({"thought": "Tap Wi-Fi", "POINT": [500, 300]}))

    def episode(llm: ScriptedLLM) -> list[str]:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="m"), SqlResponseCache(sessions))
        policy = VLMPolicy(config, gateway, lambda sha: png.getvalue())
        query = Query(uid="q", app="settings", instruction="Open Wi-Fi", path=[], goal={})

        async def play() -> list[str]:
            policy.start(query, seed="e", rollout=1)
            texts = [(await policy.act(SCREEN)).text for _ in range(2)]  # the same screen twice
            await gateway.aclose()
            return texts

        return asyncio.run(play())

    with ScriptedLLM(responder=model) as llm:
        first = episode(llm)
        seeds = [r.body["seed"] for r in llm.requests]
        again = episode(llm)
        assert len(llm.requests) == 2  # the rerun was answered from the cache
    assert first[0] == "I will tap the button" and json.loads(first[1])["POINT"] == [500, 300]
    assert seeds == [first_seed, first_seed + 1] and again == first
    greedy = config.sampling(0, "e")
    assert greedy.seed is None  # a greedy request is the same answer however often it is sent
