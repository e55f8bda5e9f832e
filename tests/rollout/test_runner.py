"""The episode runner on the simulated farm: every episode accounted for exactly once."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from querygen.pipeline import generate_queries, store_generation
from rollout.policies import NoisyOracle, OracleNoise, RandomExplorer, VLMPolicy, VLMPolicyConfig
from rollout.pool import DevicePool, Lease
from rollout.runner import EpisodeRunner, RolloutConfig
from rollout.sim.env import SimEnv
from rollout.sim.farm import SimFarm
from storage.db import transaction
from storage.keys import blob_key
from storage.models import Anchor, DeviceLease, Episode, Exclusion, Round, Step
from storage.objectstore import LocalObjectStore
from tests.support.scripted_llm import Recorded, Reply, ScriptedLLM
from tests.support.spine import new_round
from trajforge.appspec import load_app
from trajforge.domain import Query
from trajforge.gateway import LLMGateway
from trajforge.settings import LLMSettings
from trajforge.world.model import FaultConfig


def _setup(
    sessions: sessionmaker[Session], app: str = "settings", n: int = 6
) -> tuple[list[Query], int, int]:
    spec = load_app(app)
    report = generate_queries(spec, n, seed=3)
    store_generation(sessions, spec, report)
    round_id, policy_id = new_round(sessions, policy="test")
    return report.kept, round_id, policy_id


def _runner(sessions, farm: SimFarm, devices: int, policy, max_failures: int = 3, **config) -> EpisodeRunner:
    pool = DevicePool(sessions, max_failures=max_failures)
    farm.register(pool, devices)
    return EpisodeRunner(sessions, pool, farm, policy, RolloutConfig(**config))


def _count(sessions, model) -> int:
    with sessions() as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def test_perfect_oracle_succeeds_and_stores_everything(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    queries, round_id, policy_id = _setup(sessions)
    store = LocalObjectStore(tmp_path / "objects")
    runner = _runner(sessions, SimFarm(store=store), 2, NoisyOracle, rollouts_per_query=2, workers=2)
    report = asyncio.run(runner.run(queries, round_id, policy_id))
    assert (report.requested, report.completed, report.successes) == (12, 12, 12)
    assert _count(sessions, Episode) == _count(sessions, Anchor) == 12
    with sessions() as s:
        steps = s.scalars(select(Step)).all()
        assert len(steps) == report.steps and all(store.exists(blob_key(st.screenshot)) for st in steps)
        assert all(st.raw_output.startswith("<tool_call>") and st.action for st in steps)
        # the element tree each decision was made on (empty only on widget-less confirmation screens)
        assert all(st.elements is not None for st in steps)
        assert all(st.elements for st in steps if '"terminate"' not in st.raw_output)
        assert {e.device for e in s.scalars(select(Episode))} <= {"sim-0#0", "sim-1#0"}
    again = asyncio.run(runner.run(queries, round_id, policy_id))  # a rerun redoes nothing
    assert (again.completed, again.skipped) == (0, 12) and _count(sessions, Episode) == 12


def test_crashes_and_hangs_lose_and_duplicate_nothing(sessions: sessionmaker[Session]) -> None:
    queries, round_id, policy_id = _setup(sessions, "takeout", 8)
    # 3% crashes + 3% hangs per action: about half the episodes meet at least one
    farm = SimFarm(faults=FaultConfig(seed=9, crash_rate=0.03, hang_rate=0.03))
    runner = _runner(
        sessions,
        farm,
        3,
        NoisyOracle,
        max_failures=8,
        rollouts_per_query=2,
        workers=3,
        max_attempts=10,
        lease_wait_s=5,
    )
    report = asyncio.run(runner.run(queries, round_id, policy_id))
    assert report.completed == 16 and _count(sessions, Episode) == 16
    assert report.successes == 16  # the perfect oracle: every episode eventually ran clean
    assert report.retries > 0 and set(report.attempt_failures) <= {"device_crashed", "device_hung"}
    with sessions() as s:
        recorded = s.scalars(select(Exclusion.reason).where(Exclusion.item_type == "episode_attempt")).all()
        assert len(recorded) == report.retries
        uids = s.scalars(select(Episode.uid)).all()
        assert len(set(uids)) == 16
        assert all(e.status == "done" for e in s.scalars(select(Episode)))


class _Broken(NoisyOracle):
    async def act(self, observation):
        raise RuntimeError("a bug in the policy")


def test_an_unexpected_error_stops_the_other_episodes_before_their_devices_close(
    sessions: sessionmaker[Session],
) -> None:
    queries, round_id, policy_id = _setup(sessions)
    made = iter(range(1_000))
    farm = SimFarm()
    runner = _runner(  # more devices than workers: episodes keep leasing devices not seen yet
        sessions,
        farm,
        8,
        lambda: _Broken() if next(made) == 4 else NoisyOracle(),
        rollouts_per_query=2,
        workers=4,
    )
    with pytest.raises(RuntimeError, match="a bug in the policy"):  # the error itself, nothing else
        asyncio.run(runner.run(queries, round_id, policy_id))
    assert runner.environments() and not runner._envs  # every environment it built was closed
    with sessions() as s:  # and no slot is left held: a retry or a rerun finds every device free
        assert s.scalars(select(DeviceLease.holder).where(DeviceLease.holder.is_not(None))).all() == []


def test_noise_and_random_policies_fail_with_reasons(sessions: sessionmaker[Session]) -> None:
    queries, round_id, policy_id = _setup(sessions, "takeout", 6)
    noisy = lambda: NoisyOracle(OracleNoise(wrong_value=0.3, malformed=0.2, premature_terminate=0.05))  # noqa: E731
    runner = _runner(sessions, SimFarm(), 2, noisy, rollouts_per_query=2, workers=2, max_steps=25)
    report = asyncio.run(runner.run(queries, round_id, policy_id))
    assert report.completed == 12 and report.successes < 12
    assert set(report.outcomes) <= {
        "screen",
        "slot",
        "max_steps",
        "terminated_early",
        "no_terminate",
        "gave_up",
    }
    with sessions() as s:
        parse_errors = s.scalars(select(Exclusion.reason).where(Exclusion.item_type == "step")).all()
        assert parse_errors and set(parse_errors) == {"invalid_json"}
        failed = s.scalars(select(Episode).where(Episode.outcome == "failure")).all()
        assert failed and all(e.reason for e in failed)
    with transaction(sessions) as s:
        rnd = Round(number=2, policy_id=policy_id)
        s.add(rnd)
        s.flush()
        round2 = rnd.id
    explorer = _runner(sessions, SimFarm(), 1, RandomExplorer, max_steps=10)
    assert asyncio.run(explorer.run(queries[:3], round2, policy_id)).completed == 3


def test_an_environment_that_says_its_max_steps_sets_the_episodes_limit(
    sessions: sessionmaker[Session],
) -> None:
    """A desktop suite's (or task's) `max_steps` wins over the run's, read from the environment."""

    class Short(SimFarm):
        def __call__(self, lease: Lease) -> SimEnv:
            env = super().__call__(lease)
            env.max_steps = 3  # type: ignore[attr-defined]
            return env

    queries, round_id, policy_id = _setup(sessions, n=2)
    runner = _runner(sessions, Short(), 1, RandomExplorer, max_steps=25)
    asyncio.run(runner.run(queries, round_id, policy_id))
    with sessions() as s:
        episodes = s.scalars(select(Episode)).all()
        assert episodes and all(e.num_steps <= 3 for e in episodes)
        assert any(e.reason == "max_steps" and e.num_steps == 3 for e in episodes)


def _vlm_responder(rec: Recorded) -> Reply:
    step = rec.text.count("Step ")
    if step == 0:
        return Reply(content="<tool_call>{not json</tool_call>")
    if step == 1:
        return Reply(
            content='<tool_call>{"name":"mobile_use","arguments":{"action":"open","text":"Settings"}}</tool_call>'
        )
    return Reply(
        content='<tool_call>{"name":"mobile_use","arguments":{"action":"terminate","status":"success"}}</tool_call>'
    )


@pytest.mark.parametrize("on_parse_error", ["continue", "end"])
def test_vlm_policy_through_the_gateway(
    sessions: sessionmaker[Session], tmp_path: Path, on_parse_error: str
) -> None:
    queries, round_id, policy_id = _setup(sessions, "settings", 2)
    store = LocalObjectStore(tmp_path / "objects")
    farm = SimFarm(store=store)
    guidance = {queries[0].uid: "Open Settings first, then the right category."}
    with ScriptedLLM(responder=_vlm_responder) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="gui-owl"))
        config = VLMPolicyConfig(history_images=2, temperature=0.7, top_p=0.9)

        def policy() -> VLMPolicy:
            return VLMPolicy(config, gateway, lambda sha: store.get(blob_key(sha)))

        pool = DevicePool(sessions)
        farm.register(pool, 1)
        runner = EpisodeRunner(
            sessions,
            pool,
            farm,
            policy,
            RolloutConfig(rollouts_per_query=2, on_parse_error=on_parse_error),
            guidance=guidance,
        )
        report = asyncio.run(runner.run(queries, round_id, policy_id))
        bodies = [r.body for r in llm.requests]
        texts = [r.text for r in llm.requests]
        images = [r.images for r in llm.requests]
    assert report.completed == 4
    assert any("Open Settings first" in t for t in texts) and not all(
        "Open Settings first" in t for t in texts
    )
    # rollout 0 greedy, rollout 1 sampled with a seed of its own per query (a rerun repeats it)
    assert {(b["temperature"], b.get("top_p")) for b in bodies} == {(0.0, None), (0.7, 0.9)}
    seeds = {b.get("seed") for b in bodies}
    assert None in seeds and len(seeds - {None}) == 2
    assert min(images) == 1 and max(images) == (1 if on_parse_error == "end" else 2)  # the last k screenshots
    assert "mobile_use" in json.dumps(bodies[0]["messages"][0])
    with sessions() as s:
        episodes = s.scalars(select(Episode)).all()
        first_steps = s.scalars(select(Step).where(Step.index == 0)).all()
    assert all(
        st.parse_error == "invalid_json" and st.raw_output == "<tool_call>{not json</tool_call>"
        for st in first_steps
    )
    recorded = sorted((e.attempt, e.meta.get("sampling", {}).get("temperature")) for e in episodes)
    assert recorded == [(0, 0.0), (0, 0.0), (1, 0.7), (1, 0.7)]  # the settings each episode used
    if on_parse_error == "end":
        assert {e.reason for e in episodes} == {"unparseable_output:invalid_json"}
        assert all(e.num_steps == 1 for e in episodes)
    else:
        assert all(e.num_steps == 3 for e in episodes)
        assert {re.sub(r":.*", "", e.reason or "") for e in episodes} == {
            "screen"
        }  # opened, then stopped early


def test_a_uitars_finished_with_content_answers_and_ends_the_episode(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    """UI-TARS submits with `finished(content=…)`: the answer reaches the device and the episode ends
    there, claimed a success, instead of running on to max_steps."""
    queries, round_id, policy_id = _setup(sessions, "settings", 1)
    store = LocalObjectStore(tmp_path / "objects")
    farm = SimFarm(store=store)
    answer = Reply(content="Thought: the answer is on screen.\nAction: finished(content='Wi-Fi is on')")
    with ScriptedLLM(default=answer) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="ui-tars"))
        config = VLMPolicyConfig(format="uitars15")
        runner = _runner(
            sessions,
            farm,
            1,
            lambda: VLMPolicy(config, gateway, lambda sha: store.get(blob_key(sha))),
            max_steps=8,
        )
        report = asyncio.run(runner.run(queries[:1], round_id, policy_id))
        calls = len(llm.requests)
    assert report.completed == 1 and calls == 1
    with sessions() as s:
        episode = s.scalars(select(Episode)).one()
        step = s.scalars(select(Step)).one()
    assert episode.num_steps == 1 and episode.meta.get("status", "success") == "success"
    assert step.action is not None
    assert step.action.stored() == {
        "kind": "answer",
        "text": "Wi-Fi is on",
        "thought": "the answer is on screen.",
    }


def _family_responder(rec: Recorded) -> Reply:
    """UI-TARS-1.5 answers: a tap at the smart-resized centre of the screen, then, at the seventh
    request, submits."""
    if sum(m["role"] == "assistant" for m in rec.body["messages"]) >= 6:
        return Reply(content="Thought: done.\nAction: finished(content='ok')")
    return Reply(content="Thought: tap the middle.\nAction: click(point='<point>546 1204</point>')")


def test_a_family_policy_sends_its_own_request_and_is_read_in_its_coordinate_space(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    """`family: uitars15`: the published prompt as the first user message, at most 5 screenshots each
    before the model's own earlier answer, and the answer read in the smart-resized pixels the model
    saw (546,1204 of 1092x2408 is the middle of a 1080x2400 screen). The family is recorded."""
    queries, round_id, policy_id = _setup(sessions, "settings", 1)
    store = LocalObjectStore(tmp_path / "objects")
    with ScriptedLLM(responder=_family_responder) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="ui-tars-1.5"))
        config = VLMPolicyConfig(family="uitars15", format="qwen")  # the family's format wins
        runner = _runner(
            sessions,
            SimFarm(store=store),
            1,
            lambda: VLMPolicy(config, gateway, lambda sha: store.get(blob_key(sha))),
            max_steps=12,
        )
        asyncio.run(runner.run(queries[:1], round_id, policy_id))
        requests = list(llm.requests)
    assert len(requests) == 7 and [r.images for r in requests] == [1, 2, 3, 4, 5, 5, 5]
    first = requests[0].body["messages"]
    assert [m["role"] for m in first] == ["user", "user"]
    assert (
        first[0]["content"].startswith("You are a GUI agent.")
        and queries[0].instruction in first[0]["content"]
    )
    later = requests[-1].body["messages"]
    assert later[-2] == {"role": "assistant", "content": _family_responder(requests[0]).content}
    with sessions() as s:
        episode = s.scalars(select(Episode)).one()
        actions = [st.action.stored() for st in s.scalars(select(Step).order_by(Step.index)) if st.action]
    taps = [a for a in actions if a.get("kind") == "click"]
    assert (episode.meta or {})["sampling"]["family"] == "uitars15" and episode.num_steps == 7
    assert taps and all(t["point"] == [500, 500] for t in taps)


@pytest.mark.browser
@pytest.mark.slow
def test_web_farm_runs_episodes_in_chromium(sessions: sessionmaker[Session], tmp_path: Path) -> None:
    from rollout.web.env import chromium_available
    from rollout.web.farm import WebFarm
    from tests.conftest import service_missing

    if not chromium_available():
        service_missing("Chromium or Playwright missing (apt-get install chromium)")
    queries, round_id, policy_id = _setup(sessions, "ridehail", 3)
    store = LocalObjectStore(tmp_path / "objects")
    farm = WebFarm(store=store)
    pool = DevicePool(sessions)
    farm.register(pool, 2)
    runner = EpisodeRunner(sessions, pool, farm, NoisyOracle, RolloutConfig(workers=2), backend="web")
    report = asyncio.run(runner.run(queries, round_id, policy_id))
    assert (report.completed, report.successes) == (3, 3)
    with sessions() as s:
        assert {(e.device or "").split("#")[0] for e in s.scalars(select(Episode))} <= {
            "chromium-0",
            "chromium-1",
        }
        shot = s.scalars(select(Step.screenshot)).first()
    assert shot is not None and store.exists(blob_key(shot))


def test_a_farm_retired_by_faults_heals_and_the_next_run_plays_every_episode(
    sessions: sessionmaker[Session],
) -> None:
    """Faults on about 10% of actions retire both devices; the episodes left unplayed keep their
    failed attempts; a run without faults after the cool-down probes the devices back and plays
    every remaining episode.

    One worker and a cool-down longer than the run: which episode meets which fault is then fixed
    by the seeds, not by how fast this machine is (two workers let an episode that never found a
    device, rather than the one in flight, be the last left)."""
    queries, round_id, policy_id = _setup(sessions, "takeout", 8)
    faulty = SimFarm(faults=FaultConfig(seed=4, crash_rate=0.06, hang_rate=0.04))
    pool = DevicePool(sessions, max_failures=2, cooldown_s=3600)
    faulty.register(pool, 2)
    config = RolloutConfig(rollouts_per_query=2, workers=1, lease_wait_s=0.2, max_attempts=8)
    first = asyncio.run(
        EpisodeRunner(sessions, pool, faulty, NoisyOracle, config).run(queries, round_id, policy_id)
    )
    assert first.not_run > 0, first.render()  # devices retired with episodes still to play
    with sessions() as s:
        attempts = s.scalars(select(Exclusion.item_key).where(Exclusion.item_type == "episode_attempt")).all()
        stored = set(s.scalars(select(Episode.uid)))
    unplayed_with_failures = {key.split(":")[0] for key in attempts} - stored
    assert unplayed_with_failures, "the failed attempts of episodes that never ran are recorded"

    pool.cooldown = timedelta(0)  # the cool-down is over: both retired devices are due a probe
    healthy = SimFarm()
    patient = config.model_copy(update={"lease_wait_s": 5.0, "workers": 2})
    second = asyncio.run(
        EpisodeRunner(sessions, pool, healthy, NoisyOracle, patient).run(queries, round_id, policy_id)
    )
    assert second.not_run == 0 and second.completed == first.not_run, second.render()
    assert second.skipped == first.completed and _count(sessions, Episode) == 16
    assert {d.health for d in pool.devices()} == {"healthy"}  # probed after the cool-down, returned


@pytest.mark.parametrize(
    ("at_end", "status", "reason", "outcome", "why"),
    [
        (True, None, "max_steps", "success", None),  # OSWorld: the checks decide however it ended
        (True, "success", None, "success", None),
        (True, "failure", None, "failure", "gave_up"),  # the policy said it could not: its FAIL
        (False, None, "max_steps", "failure", "max_steps"),  # a phone: the policy must claim it
        (False, None, None, "failure", "no_terminate"),
    ],
)
def test_a_verifier_that_judges_at_the_end_decides_an_episode_the_policy_never_ended(
    at_end: bool, status: str | None, reason: str | None, outcome: str, why: str | None
) -> None:
    from rollout.play import Play
    from trajforge.world.verify import VerifierResult

    play = Play(status=status, reason=reason)
    episode = play.episode("uid", 0, VerifierResult(True, None, "1 check(s) met", 1.0, at_end=at_end))
    assert (episode.outcome, episode.reason) == (outcome, why)
    faulted = Play(reason="policy_error", policy_failure={"reason": "llm_error"})  # replayed by a rerun
    assert faulted.episode("uid", 0, VerifierResult(True, at_end=True)).outcome == "failure"
