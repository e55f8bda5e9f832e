"""The steps of one self-evolving round, as plain Python: each is idempotent and resumable.

A step takes the settings and the round number and returns a small JSON-able report;
the Prefect flows in `flows/` only compose them. Killed at any point and run again, a
step finds what is already stored (queries of the round, episodes by uid, judgments,
samples, the sealed dataset version, the registered policy) and does only the rest.

Round 1 rolls out the random explorer, plus one guided demonstration (the ground-truth
path replayed) of the hardest `guided_fraction` of its queries. Round N > 1 rolls out
the policy trained after round N - 1.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from evolve import lifecycle
from evolve.heldout import evaluate_policy, heldout_queries
from evolve.lifecycle import close_round, find_round, open_round, play
from evolve.ownership import foreign_round, loop_round
from evolve.policies import policy_factory, register_policy
from evolve.report import RoundFigures, tally_episodes
from evolve.revisits import latest_guidance, revisit_queries, revisit_rates
from evolve.spine import Spine, open_farm, open_pool, open_prober, open_spine
from evolve.stages import require
from evolve.suite_tasks import suite_round_queries
from publish.versions import PublishConfig, publish
from querygen.pipeline import generate_round
from rollout.policies import NoisyOracle, OracleNoise, Policy
from rollout.runner import RolloutConfig
from storage.datasets import manifest
from storage.db import transaction
from storage.features import FeatureStore, make_featurizer
from storage.models import App, Dataset, DatasetVersion, Episode, Round, Sample, Step
from storage.models import Policy as PolicyRow
from storage.models import Query as QueryRow
from trajforge.domain import Query
from trajforge.endpoints import charge_round
from trajforge.errors import ConfigError, DeviceError
from trajforge.families import get_family
from trajforge.settings import Settings

EXPLORER = ("random-explorer", 0)
GUIDED = ("guided-demo", 0)
DIFFICULTY = {"hard": 0, "medium": 1, "easy": 2}


def config_hash(settings: Settings) -> str:
    """What makes two runs of a round the same run (resuming with another config is refused)."""
    ev = settings.evolve
    keep = ev.model_dump(
        include={"queries_per_app", "rollouts", "max_steps", "guided_fraction", "seed", "revisit_share"}
    )
    if ev.tier_mix:  # only when set, so rounds started before the curriculum existed still resume
        keep["tier_mix"] = ev.tier_mix
    keep |= {"filtering": ev.filtering, "dataset": ev.dataset}
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()


def _first_policy(s: Session, settings: Settings) -> int:
    """Round 1's policy: the random explorer, or the user's served checkpoint (`evolve.first_policy`)."""
    if settings.evolve.first_policy == "random-explorer":
        return register_policy(s, *EXPLORER, meta={"max_actions": settings.evolve.max_steps})
    llm = settings.llm.for_group("policy")
    if llm.offline:
        raise ConfigError(
            "evolve.first_policy: vlm needs the checkpoint's endpoint; "
            "set llm.policy.base_url or llm.base_url (TRAJFORGE_LLM_BASE_URL)"
        )
    family = settings.policy.family
    fmt = get_family(family).action_format if family else settings.trainer.action_format
    meta = {"model": llm.model, "format": fmt, "family": family}
    return register_policy(s, f"vlm-{family}" if family else "vlm", 0, meta=meta, endpoint=llm.base_url)


def start_round(settings: Settings, number: int) -> dict[str, Any]:
    """Open round `number` with its policy (idempotent); say whether it is already done."""
    spine = open_spine(settings)
    wanted = config_hash(settings)
    with transaction(spine.sessions) as s:
        row = s.scalars(select(Round).where(Round.number == number)).first()
        if row is None:
            if number == 1:
                policy_id = _first_policy(s, settings)
            else:
                before = s.scalars(select(Round).where(Round.number == number - 1)).first()
                trained = (before.stats or {}).get("next_policy_id") if before else None
                if trained is None:
                    raise ConfigError(
                        f"round {number - 1} has not trained a policy yet; run `trajforge evolve` "
                        f"with --rounds {number} to finish it first"
                    )
                policy_id = int(trained)
            row = open_round(
                s, policy_id, number=number, seed=settings.evolve.seed + number, config_hash=wanted
            )
        elif not loop_round(row):
            raise foreign_round(row)
        elif row.config_hash != wanted and row.status != "done":
            raise ConfigError(
                f"round {number} was started with another evolve config (hash {row.config_hash[:12]}); "
                "rerun with that config, or use a fresh TRAJFORGE_HOME"
            )
        policy = s.get(PolicyRow, row.policy_id)
        assert policy is not None
        return {
            "round": number,
            "round_id": row.id,
            "policy": f"{policy.name}@{policy.version}",
            "done": row.status == "done",
            "stats": dict(row.stats or {}) if row.status == "done" else {},
        }


def round_queries(settings: Settings, number: int) -> list[str]:
    """The round's query uids: its new queries (stored ones, else sampled per app and stored, one
    transaction per app), then its revisits (`evolve.revisits`)."""
    spine = open_spine(settings)
    rnd = find_round(spine, number)
    uids: list[str] = []
    for spec in spine.apps:
        with spine.sessions() as s:
            have = s.scalars(
                select(QueryRow.uid)
                .join(App, App.id == QueryRow.app_id)
                .where(QueryRow.round_id == rnd.id, App.name == spec.name, QueryRow.status == "kept")
                .order_by(QueryRow.uid)
            ).all()
        if not have:
            ev = settings.evolve
            generated = generate_round(spine.sessions, spec, ev.queries_per_app, rnd, ev.mix_of(number))
            have = sorted(q.uid for q in generated.kept)
        uids.extend(have)
    uids.extend(suite_round_queries(spine, rnd))
    return uids + [u for u in revisit_queries(spine, settings, rnd) if u not in uids]


def load_queries(spine: Spine, uids: list[str]) -> list[Query]:
    with spine.sessions() as s:
        rows = s.execute(
            select(QueryRow, App.name).join(App, App.id == QueryRow.app_id).where(QueryRow.uid.in_(uids))
        ).all()
    by_uid = {q.uid: q.to_domain(app) for q, app in rows}
    return [by_uid[u] for u in uids if u in by_uid]


def shards(items: list[str], n: int) -> list[list[str]]:
    """Round-robin shards (balanced by position, stable for a given list)."""
    return [part for part in (items[i::n] for i in range(max(1, n))) if part]


def register_devices(settings: Settings) -> int:
    """The loop's devices, in the pool every rollout task leases from (idempotent)."""
    spine = open_spine(settings)
    open_farm(spine).register(open_pool(spine), settings.evolve.devices)
    return settings.evolve.devices


def roll(
    spine: Spine,
    rnd: Round,
    queries: list[Query],
    policy_id: int,
    make: Callable[[], Policy],
    config: RolloutConfig,
    guidance: dict[str, str] | None = None,
) -> dict[str, Any]:
    farm = open_farm(spine)
    report, _ = play(
        spine,
        farm,
        open_pool(spine),
        rnd.id,
        policy_id,
        queries,
        make,
        config,
        backend=farm.backend,
        guidance=guidance,
    )
    if report.not_run:  # the task fails loudly; its retry (or a rerun) plays only what is missing
        raise DeviceError(
            f"{report.not_run} episodes of round {rnd.number} found no free device within "
            f"{config.lease_wait_s:g}s; rerun to play them (stored episodes are not redone)"
        )
    keys = ("episodes", "already_stored", "successes", "steps", "seconds")
    values = (report.completed, report.skipped, report.successes, report.steps, round(report.seconds, 3))
    return dict(zip(keys, values, strict=True))


def rollout_shard(settings: Settings, number: int, uids: list[str]) -> dict[str, Any]:
    """K rollouts of the round's policy on these queries; episodes stored earlier are not redone."""
    spine = open_spine(settings)
    rnd = find_round(spine, number)
    ev = settings.evolve
    guidance, demos = latest_guidance(spine, uids)
    make = policy_factory(spine, rnd.policy_id, demos)
    workers = max(1, -(-ev.devices // ev.shards))  # the shards run at once and share the devices
    config = RolloutConfig(rollouts_per_query=ev.rollouts, workers=workers, max_steps=ev.max_steps)
    return roll(spine, rnd, load_queries(spine, uids), rnd.policy_id, make, config, guidance)


def guided_queries(settings: Settings, number: int, uids: list[str]) -> list[str]:
    """Round 1's hardest queries of each app (difficulty, then path length), `guided_fraction` of them."""
    if number != 1 or settings.evolve.guided_fraction <= 0:
        return []
    per_app: dict[str, list[Query]] = {}
    for q in load_queries(open_spine(settings), uids):
        if q.path:  # a suite task has no ground truth to replay
            per_app.setdefault(q.app, []).append(q)
    picked: list[str] = []
    for app in sorted(per_app):
        ranked = sorted(per_app[app], key=lambda q: (DIFFICULTY[q.difficulty], -len(q.path), q.uid))
        picked += [q.uid for q in ranked[: math.ceil(settings.evolve.guided_fraction * len(ranked))]]
    return picked


def demonstrate(settings: Settings, number: int, uids: list[str]) -> dict[str, Any]:
    """One guided demonstration per query: the ground-truth path replayed without noise."""
    spine = open_spine(settings)
    rnd = find_round(spine, number)
    with transaction(spine.sessions) as s:
        policy_id = register_policy(s, *GUIDED, meta={"noise": OracleNoise().model_dump()})
    ev = settings.evolve
    config = RolloutConfig(
        rollouts_per_query=1, first_rollout=ev.rollouts, workers=ev.devices, max_steps=ev.max_steps
    )
    return roll(spine, rnd, load_queries(spine, uids), policy_id, lambda: NoisyOracle(OracleNoise()), config)


def episode_uids(settings: Settings, number: int) -> list[str]:
    spine = open_spine(settings)
    rnd = find_round(spine, number)
    with spine.sessions() as s:
        return list(s.scalars(select(Episode.uid).where(Episode.round_id == rnd.id).order_by(Episode.uid)))


def featurise_shard(settings: Settings, number: int, uids: list[str]) -> dict[str, Any]:
    """Screenshot features of these episodes into the feature cache (curation then finds them)."""
    spine = open_spine(settings)
    with spine.sessions() as s:
        hashes = s.scalars(
            select(Step.screenshot).join(Episode, Episode.id == Step.episode_id).where(Episode.uid.in_(uids))
        ).all()
    featurizer = make_featurizer(settings.curate, spine.sessions, spine.store)
    features = FeatureStore(spine.sessions, featurizer, spine.frames)
    features.vectors(hashes)
    return features.stats.as_dict()


def judge(settings: Settings, number: int) -> dict[str, Any]:
    """Offline critics on every step and episode; the model critics too when an endpoint is set."""
    spine = open_spine(settings)
    judged = lifecycle.judge(spine, find_round(spine, number).id)
    out: dict[str, Any] = {"episodes": judged.offline.episodes, "steps": dict(judged.offline.steps)}
    return out if judged.model_judged is None else {**out, "model_judged": judged.model_judged}


def calibrate(settings: Settings, number: int) -> dict[str, Any]:
    """Critics against the anchors (verifier, or a human's verdict where one exists); CSRS extraction."""
    spine = open_spine(settings)
    consensus, samples = lifecycle.calibrate(spine, find_round(spine, number).id)
    return {
        "consensus": consensus,
        "kept": samples.kept,
        "dropped": samples.dropped,
        "undecided": dict(samples.undecided),
    }


def curate(settings: Settings, number: int) -> dict[str, Any]:
    """Dedup, guidance, thoughts, recovery and balancing (features come from the cache when fanned out)."""
    spine = open_spine(settings)
    report = lifecycle.curate(spine, find_round(spine, number).id, open_prober(spine))
    return {
        "samples": dict(report.samples),
        "recovery": report.recovery.as_dict(),
        "dedup": {
            "kept": report.dedup.kept,
            "total": report.dedup.total,
            "reasons": dict(report.dedup.reasons),
        },
        "curriculum": {**report.curriculum.as_dict(), "tier_mix": settings.evolve.mix_of(number)},
    }


def publish_config(settings: Settings, number: int) -> PublishConfig:
    """Every round so far; filtering off publishes dropped and held samples too."""
    filters = {
        "curate": settings.curate.model_dump(mode="json"),
        "critics": settings.critics.model_dump(mode="json"),
        "filtering": settings.evolve.filtering,
    }
    statuses = ("kept",) if settings.evolve.filtering else ("kept", "dropped", "held")
    return PublishConfig(rounds=tuple(range(1, number + 1)), filters=filters, statuses=statuses)


def publish_round(settings: Settings, number: int) -> dict[str, Any]:
    """Seal the dataset version of this round (once: a version with the same config is reused)."""
    spine = open_spine(settings)
    require(spine.sessions, find_round(spine, number).id, "publish")
    name, config = settings.evolve.dataset, publish_config(settings, number)
    with spine.sessions() as s:
        sealed = s.execute(
            select(DatasetVersion.version, DatasetVersion.manifest_sha256)
            .join(Dataset, Dataset.id == DatasetVersion.dataset_id)
            .where(
                Dataset.name == name,
                DatasetVersion.status == "sealed",
                DatasetVersion.config_hash == config.config_hash,
            )
        ).first()
    if sealed is not None:
        version, digest = sealed
        return {
            "dataset": name,
            "version": version,
            "manifest_sha256": digest,
            "rows": manifest(spine.sessions, spine.store, name, version).rows,
            "reused": True,
        }
    report = publish(spine.sessions, spine.store, name, config, description=f"evolve round {number}")
    return {
        "dataset": name,
        "version": report.version,
        "manifest_sha256": report.manifest_sha256,
        "rows": report.rows,
        "reused": False,
    }


def round_stats(settings: Settings, number: int) -> dict[str, Any]:
    """Success of the round's own policy (guided demonstrations apart), per app too."""
    spine = open_spine(settings)
    rnd = find_round(spine, number)
    fig = RoundFigures(number, "", rnd.status)
    with spine.sessions() as s:
        tally_episodes(s, rnd, fig)
        guided = s.execute(
            select(Episode.outcome, func.count())
            .join(PolicyRow, PolicyRow.id == Episode.policy_id)
            .where(Episode.round_id == rnd.id, PolicyRow.name == GUIDED[0])
            .group_by(Episode.outcome)
        ).all()
        samples = s.execute(
            select(Sample.status, func.count()).where(Sample.round_id == rnd.id).group_by(Sample.status)
        ).all()
    return {
        "episodes": fig.episodes,
        "successes": fig.successes,
        "success_rate": fig.success_rate,
        "model_faults": fig.model_faults,
        "per_app": {a: fig.per_app[a] for a in sorted(fig.per_app)},
        "guided": {outcome: n for outcome, n in guided},
        "samples": {status: n for status, n in samples},
        "revisit_rates": revisit_rates(spine, rnd),
    }


def finish_round(settings: Settings, number: int, extra: dict[str, Any]) -> dict[str, Any]:
    """Mark the round done with its figures (the report reads them), its policy's held-out ones too."""
    spine = open_spine(settings)
    stats = round_stats(settings, number) | extra
    if settings.evolve.heldout_per_app:
        rnd = find_round(spine, number)
        with charge_round(rnd.id):
            stats["heldout"] = evaluate_policy(spine, rnd.policy_id, heldout_queries(spine))
    close_round(spine, number, stats)
    return stats


def finished_rounds(settings: Settings) -> int:
    """How many rounds, 1..N without a gap, are done."""
    spine = open_spine(settings)
    with spine.sessions() as s:
        done = set(s.scalars(select(Round.number).where(Round.status == "done")))
    n = 0
    while n + 1 in done:
        n += 1
    return n
