"""The round's steps as plain Python (no Prefect): resumable, idempotent, and the trainer hook."""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from curation.encoder import round_encoder
from evolve import steps
from evolve.rounds_json import rounds_table
from evolve.spine import open_spine
from publish.train import TrainerError, train_next
from publish.versions import PublishConfig, publish
from querygen.revisits import revisit_rates
from rollout import loop as rollout_loop
from rollout import stages as rollouts
from rollout.loop import latest_guidance
from rollout.policies.knn import KnnPolicy
from rollout.pool import DevicePool
from rollout.runner import RolloutConfig
from rollout.versions import policy_factory
from storage.models import App, Episode, Exclusion, Guidance, Policy, Query, Round, Sample
from tests.support.evolve import roll_out, stage
from trajforge.errors import ConfigError, DeviceError
from trajforge.settings import Settings
from trajforge.stage import split
from trajforge.world.model import FaultConfig


def run_round_one(settings: Settings) -> dict:
    assert stage(settings, "start", 1) == {
        "round": 1,
        "round_id": 1,
        "policy": "random-explorer@0",
        "done": False,
        "stats": {},
    }
    uids = stage(settings, "queries", 1)
    assert len(uids) == 4 and stage(settings, "queries", 1) == uids  # stored, not sampled again
    stage(settings, "devices", 1)
    for part in split(uids, 2):
        roll_out(settings, 1, part)
    guided = rollouts.guided_queries(open_spine(settings), 1, uids)
    assert len(guided) == 4  # one per app (half of one query, rounded up)
    demos = stage(settings, "guided", 1, queries=uids)
    assert demos["successes"] == 4  # the ground truth replayed succeeds
    stage(settings, "judge", 1)
    stage(settings, "calibrate", 1)
    stage(settings, "curate", 1)
    return stage(settings, "publish", 1)


@pytest.mark.slow  # over 40 s of CPU on 2 cores: the fast tier stays under 15 min
def test_a_round_resumes_and_trains_the_next_policy(evolve_settings: Settings) -> None:
    settings = evolve_settings
    published = run_round_one(settings)
    spine = open_spine(settings)
    with spine.sessions() as s:
        episodes = s.scalar(select(func.count()).select_from(Episode))
    assert episodes == 4 * 2 + 4
    again = roll_out(settings, 1, stage(settings, "queries", 1))
    assert again["episodes"] == 0 and again["already_stored"] == 8  # nothing redone
    assert stage(settings, "publish", 1) == {**published, "reused": True}

    trained = stage(settings, "train", 1, publish=published)
    assert trained["policy"] == "knn@1" and trained["checkpoint"] == "store:checkpoints/knn/v1/"
    assert stage(settings, "train", 1, publish=published)["resumed"] is True
    with pytest.raises(ConfigError, match="round 1 has not trained a policy yet"):
        stage(settings, "start", 2)  # trained is not chosen before the gate runs
    promoted = stage(settings, "promote", 1)
    assert promoted["promoted"] is True and promoted["policy"] == "knn@1"  # the explorer solves nothing
    assert promoted["current"]["successes"] == 0 and promoted["candidate"]["episodes"] == 4
    assert stage(settings, "promote", 1) == promoted  # decided once
    stats = steps.finish_round(open_spine(settings), 1, {"dataset_version": published["version"]})
    assert stats["episodes"] == 8 and stats["guided"] == {"success": 4}
    assert stats["heldout"] == promoted["current"]  # the round's policy on the held-out set, evaluated once
    with spine.sessions() as s:
        queries = s.scalar(select(func.count()).select_from(Query))  # the held-out set's too

    opened = stage(settings, "start", 2)
    assert opened["policy"] == "knn@1"
    with spine.sessions() as s:
        rnd = s.scalars(select(Round).where(Round.number == 2)).one()
        assert s.scalar(select(func.count()).select_from(Query)) == queries
    policy = policy_factory(spine, rnd.policy_id)()
    assert isinstance(policy, KnnPolicy) and len(policy.memory) > 0
    assert steps.finished_rounds(open_spine(settings)) == 1

    # the screen encoder: none before round 2; round 2 trains one on round 1's screenshots, once
    def encoder(number: int) -> dict:
        return round_encoder(spine.sessions, spine.store, spine.frames, settings.curate, number)

    assert encoder(1) == {
        "featurizer": "phash",
        "source": "fallback",
        "reason": "no_screenshots_before_this_round",
    }
    encoded = encoder(2)
    assert encoded["source"] == "trained" and encoded["steps"] == 3 and encoded["images"] >= 8
    assert encoder(2) == {"featurizer": "resnet", "source": "stored", "encoder": encoded["encoder"]}

    # revisits: round 1's hard queries come back in round 2, chosen once, with their guidance
    uids = stage(settings, "queries", 2)
    new, revisits = uids[:4], uids[4:]
    assert stage(settings, "queries", 2) == uids
    with spine.sessions() as s:
        guided = set(s.scalars(select(Guidance.query_uid).where(Guidance.round_id == 1)))
    assert revisits and set(revisits) <= guided and not set(revisits) & set(new)
    _, demos = latest_guidance(spine, revisits)
    assert demos and all(d["screenshot"] and d["action"]["kind"] for d in demos)
    assert {d["instruction"] for d in demos} <= {
        q.instruction for q in rollouts.load_queries(spine, revisits)
    }
    taught = policy_factory(spine, rnd.policy_id, demos)()
    assert isinstance(taught, KnnPolicy) and len(taught.memory) == len(policy.memory) + len(demos)
    roll_out(settings, 2, revisits)
    rates = revisit_rates(spine, spine.round(2))
    assert [r["query"] for r in rates] == revisits
    assert all(0 <= r["after"] <= 1 and r["before"] <= settings.curate.guidance_pass_rate for r in rates)
    assert (
        steps.round_stats(open_spine(settings), 2)["episodes"] == 0
    )  # success curves count new queries only

    # exploration: round 1's demonstrations solved every app, so nothing is unsolved; an app whose
    # every earlier episode failed gets the explorer's extra rollouts on its queries, once
    assert rollouts.unsolved_queries(open_spine(settings), 2, uids) == []
    app_of = {q.uid: q.app for q in rollouts.load_queries(spine, uids)}
    app = app_of[new[0]]
    with spine.sessions() as s, s.begin():
        ids = select(Query.id).join(App, App.id == Query.app_id).where(App.name == app)
        for episode in s.scalars(select(Episode).where(Episode.round_id == 1, Episode.query_id.in_(ids))):
            episode.outcome = "failure"
    unsolved = rollouts.unsolved_queries(open_spine(settings), 2, uids)
    assert unsolved and {app_of[u] for u in unsolved} == {app}
    explored = stage(settings, "explore", 2, queries=uids)
    assert explored["queries"] == len(unsolved) and explored["episodes"] == len(unsolved)  # ceil(0.5 x 2)
    assert stage(settings, "explore", 2, queries=uids)["already_stored"] == len(unsolved)
    with spine.sessions() as s:
        names = s.scalars(
            select(Policy.name).join(Episode, Episode.policy_id == Policy.id).where(Episode.round_id == 2)
        ).all()
    assert names.count("random-explorer") == len(unsolved)
    assert steps.round_stats(open_spine(settings), 2)["guided"] == {}  # the explorer is not a demonstration
    steps.finish_round(open_spine(settings), 2, {})
    second = rounds_table(spine.sessions)["rounds"][1]
    assert second["overall"]["episodes"] == 0 and [r["query"] for r in second["revisits"]] == revisits


def test_round_one_can_be_the_users_checkpoint_sent_its_familys_requests(evolve_settings: Settings) -> None:
    """`evolve.first_policy: vlm`: round 1 rolls out the served checkpoint (not the random explorer),
    registered with its endpoint, model and family; its policy speaks the family's own requests."""
    settings = evolve_settings.model_copy(
        update={"evolve": evolve_settings.evolve.model_copy(update={"first_policy": "vlm"})}
    )
    with pytest.raises(ConfigError, match="first_policy: vlm needs the checkpoint's endpoint"):
        stage(settings, "start", 1)
    served = settings.model_copy(
        update={
            "llm": settings.llm.model_copy(
                update={"base_url": "http://127.0.0.1:9/v1", "model": "ui-tars-7b"}
            ),
            "policy": settings.policy.model_copy(update={"family": "uitars15"}),
        }
    )
    started = stage(served, "start", 1)
    assert started["policy"] == "vlm-uitars15@0"
    spine = open_spine(served)
    with spine.sessions() as s:
        row = s.scalars(select(Policy).where(Policy.name == "vlm-uitars15")).one()
    assert row.endpoint == "http://127.0.0.1:9/v1"
    assert row.meta == {"model": "ui-tars-7b", "format": "uitars15", "family": "uitars15"}
    policy = policy_factory(spine, row.id)()
    assert policy.family is not None and policy.family.name == "uitars15"  # type: ignore[attr-defined]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_episodes_that_find_no_free_device_fail_the_shard_and_a_rerun_plays_them(
    evolve_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = evolve_settings
    monkeypatch.setattr(rollouts, "RolloutConfig", functools.partial(RolloutConfig, lease_wait_s=0.3))
    stage(settings, "start", 1)
    uids = stage(settings, "queries", 1)
    stage(settings, "devices", 1)
    pool = DevicePool(open_spine(settings).sessions)
    held = [pool.lease("another-user", "sim") for _ in range(settings.evolve.devices)]
    assert all(held)  # every device busy elsewhere
    with pytest.raises(DeviceError, match=r"4 episodes of round 1 found no free device within 0.3s; rerun"):
        roll_out(settings, 1, uids)
    for lease in held:
        assert lease is not None
        pool.release(lease)
    played = roll_out(settings, 1, uids)
    assert played["episodes"] == 8 and played["already_stored"] == 0  # nothing was stored half-way


def test_round_two_needs_round_one_and_a_config_change_is_refused(evolve_settings: Settings) -> None:
    settings = evolve_settings
    with pytest.raises(ConfigError, match="round 1 has not trained a policy yet"):
        stage(settings, "start", 2)
    stage(settings, "start", 1)
    other = settings.model_copy(update={"evolve": settings.evolve.model_copy(update={"rollouts": 3})})
    with pytest.raises(ConfigError, match="round 1 was started with another evolve config"):
        stage(other, "start", 1)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_tier_mix_shapes_new_queries_and_the_round_reports_its_curriculum(
    evolve_settings: Settings,
) -> None:
    mix = [{"localization": 1.0}]
    ev = evolve_settings.evolve.model_copy(update={"tier_mix": mix, "queries_per_app": 2})
    settings = evolve_settings.model_copy(update={"evolve": ev})
    stage(settings, "start", 1)
    uids = stage(settings, "queries", 1)
    other = settings.model_copy(update={"evolve": ev.model_copy(update={"tier_mix": []})})
    with pytest.raises(ConfigError, match="another evolve config"):
        stage(other, "start", 1)  # the mix decides the queries: a round keeps the mix it began with
    spine = open_spine(settings)
    with spine.sessions() as s:
        tiers = {q.uid: (q.meta or {}).get("tier") for q in s.scalars(select(Query))}
    assert set(tiers) == set(uids) and len(uids) == 8
    assert sum(t == "localization" for t in tiers.values()) >= 4  # settings and shopping offer them
    stage(settings, "devices", 1)
    roll_out(settings, 1, uids)
    stage(settings, "judge", 1)
    stage(settings, "calibrate", 1)
    curated = stage(settings, "curate", 1)["curriculum"]
    assert curated["tier_mix"] == {"localization": 1.0}
    assert sum(curated["tiers"].values()) == 8 and curated["held"] >= 0
    steps.finish_round(open_spine(settings), 1, {"curriculum": curated})
    row = rounds_table(spine.sessions)["rounds"][0]
    assert row["curriculum"] == curated
    assert sum(t["episodes"] for t in row["tiers"].values()) == row["overall"]["episodes"] == 8 * 2


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_filtering_off_and_an_external_trainer(evolve_settings: Settings, tmp_path: Path) -> None:
    settings = evolve_settings
    published = run_round_one(settings)
    spine = open_spine(settings)
    with spine.sessions() as s:
        failed = s.scalar(
            select(func.count()).select_from(Sample).where(Sample.reason == "trajectory_failed")
        )
    assert (failed or 0) > 0  # the failed trajectories' actions are kept as dropped data, with their reason
    everything = publish(spine.sessions, spine.store, "ablation", PublishConfig(statuses=("kept", "dropped")))
    assert everything.rows > published["rows"]

    script = tmp_path / "trainer.py"
    script.write_text(
        "import pathlib, sys\n"
        "data, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])\n"
        "assert any(data.glob(f'*_v{sys.argv[3]}_train.jsonl')) and (data / 'dataset_info.json').is_file()\n"
        "(out / 'model.safetensors').write_text('weights')\n"
    )  # {version}: the dataset version, which names LLaMA-Factory's dataset in dataset_info.json
    trainer = settings.trainer.model_copy(
        update={
            "command": f"{sys.executable} {script} {{dataset}} {{output}} {{version}}",
            "name": "my-agent",
        }
    )
    external = settings.model_copy(update={"trainer": trainer})
    with pytest.raises(ValueError, match=r"trainer\.endpoint is not"):  # when the settings load
        type(trainer).model_validate(trainer.model_dump())
    failing = external.model_copy(
        update={
            "trainer": trainer.model_copy(
                update={
                    "command": f"{sys.executable} -c 'import sys; sys.exit(3)'",
                    "endpoint": "http://127.0.0.1:9/v1",
                }
            )
        }
    )
    with pytest.raises(TrainerError, match="exited 3"):
        train_next(open_spine(failing), 1, published["version"])
    with spine.sessions() as s:
        assert s.scalar(select(func.count()).select_from(Policy).where(Policy.name == "my-agent")) == 0
    served = external.model_copy(
        update={"trainer": trainer.model_copy(update={"endpoint": "http://gpu-box:8000/v1"})}
    )
    trained = train_next(open_spine(served), 1, published["version"])
    assert trained["policy"] == "my-agent@1" and trained["endpoint"] == "http://gpu-box:8000/v1"
    with spine.sessions() as s:
        row = s.scalars(select(Policy).where(Policy.name == "my-agent")).one()
    assert row.checkpoint_uri and (Path(row.checkpoint_uri) / "model.safetensors").is_file()
    assert row.meta["model"] == row.checkpoint_uri and row.meta["dataset_version"] == published["version"]
    assert type(policy_factory(spine, row.id)()).__name__ == "VLMPolicy"
    # a released checkpoint fine-tuned on its own family's conversations is rolled out as that family
    script.write_text(
        "import json, pathlib, sys\n"
        "data, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])\n"
        "rows = [json.loads(line) for f in data.glob('*.jsonl') for line in f.read_text().splitlines()]\n"
        "assert any(r['messages'][0]['content'].startswith('You are a GUI agent.') for r in rows)\n"
        "(out / 'model.safetensors').write_text('weights')\n"
    )
    family = served.model_copy(
        update={"trainer": served.trainer.model_copy(update={"family": "uitars15", "name": "tars-ft"})}
    )
    with spine.sessions() as s:  # round 1 trains again, for another candidate
        rnd = s.scalars(select(Round).where(Round.number == 1)).one()
        rnd.stats = {k: v for k, v in (rnd.stats or {}).items() if k != "candidate_policy_id"}
        s.commit()
    train_next(open_spine(family), 1, published["version"])
    with spine.sessions() as s:
        tars = s.scalars(select(Policy).where(Policy.name == "tars-ft")).one()
    assert (tars.meta["family"], tars.meta["format"]) == ("uitars15", "uitars15")
    assert policy_factory(spine, tars.id)().family.name == "uitars15"  # type: ignore[attr-defined]


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # rounds on PostgreSQL: tests/flows
def test_a_round_runs_on_the_web_backend_and_the_critics_agree_with_its_verifier(
    evolve_settings: Settings,
) -> None:
    from rollout.web.env import chromium_available

    if not chromium_available():
        pytest.skip("needs Debian's chromium and Playwright")
    settings = evolve_settings.model_copy(
        update={"evolve": evolve_settings.evolve.model_copy(update={"backend": "web"})}
    )
    run_round_one(settings)
    spine = open_spine(settings)
    with spine.sessions() as s:
        devices = set(s.scalars(select(Episode.device)))
    assert devices and all(str(d).startswith("chromium-") for d in devices)
    consensus = stage(settings, "calibrate", 1)["consensus"]
    # 12 anchored episodes: a fold of queries whose other folds hold too few anchors of both outcomes
    # leaves its episodes unjudged (the learned critic abstains); every verdict given agrees
    assert consensus["n"] >= 4 and consensus["accuracy"] >= 0.95, consensus


def test_the_web_backend_without_chromium_is_one_clear_error(
    evolve_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rollout_loop, "chromium_available", lambda: False)
    settings = evolve_settings.model_copy(
        update={"evolve": evolve_settings.evolve.model_copy(update={"backend": "web"})}
    )
    with pytest.raises(ConfigError, match=r"evolve\.backend 'web' needs Chromium"):
        stage(settings, "devices", 1)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_fault_drill_in_the_config_then_a_calm_round_plays_every_episode(evolve_settings: Settings) -> None:
    """`evolve.faults` drills the loop's devices (crashes and hangs at about 10% of actions); the
    drill is not part of the round's identity, so the round resumes without it, and every episode
    of the next rollout is played, on devices returned from retirement."""
    ev = evolve_settings.evolve
    drill = evolve_settings.model_copy(
        update={
            "evolve": ev.model_copy(
                update={
                    "faults": FaultConfig(seed=2, crash_rate=0.06, hang_rate=0.04),
                    "device_cooldown_s": 0.2,
                }
            )
        }
    )
    stage(drill, "start", 1)
    uids = stage(drill, "queries", 1)
    stage(drill, "devices", 1)
    with contextlib.suppress(DeviceError):  # devices resting when the last episodes asked: rerun
        roll_out(drill, 1, uids)
    sessions = open_spine(drill).sessions
    with sessions() as s:
        attempts = s.scalar(
            select(func.count()).select_from(Exclusion).where(Exclusion.item_type == "episode_attempt")
        )
    assert attempts, "the drill's faults reached the devices"
    calm = evolve_settings.model_copy(update={"evolve": ev.model_copy(update={"device_cooldown_s": 0.2})})
    stage(calm, "start", 1)  # same round: faults are not in its config hash
    played = roll_out(calm, 1, uids)
    assert played["episodes"] + played["already_stored"] == len(uids) * ev.rollouts


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_round_whose_every_policy_call_failed_has_no_success_rate(evolve_settings: Settings) -> None:
    """Episodes a failed policy call ended (`policy_error`) have no outcome: a round of only those
    reports no success rate and says why, instead of 0%."""
    from evolve.report import collect, success_text

    settings = evolve_settings
    stage(settings, "start", 1)
    uids = stage(settings, "queries", 1)
    stage(settings, "devices", 1)
    roll_out(settings, 1, uids)
    spine = open_spine(settings)
    with spine.sessions() as s:
        for episode in s.scalars(select(Episode)):
            episode.reason, episode.outcome = "policy_error", "failure"
        s.commit()
        played = s.scalar(select(func.count()).select_from(Episode))
    stats = steps.round_stats(open_spine(settings), 1)
    assert (stats["success_rate"], stats["episodes"], stats["model_faults"]) == (None, 0, played)
    overall = rounds_table(spine.sessions)["rounds"][0]["overall"]
    assert (overall["success_rate"], overall["model_faults"]) == (None, played)
    fig = collect(spine.sessions)[0]
    assert (
        success_text(fig.success_rate, fig.model_faults)
        == f"n/a (every policy call failed: {played} episodes)"
    )
