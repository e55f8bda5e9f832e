"""The loop's own stages of a round: `start` (open round N with its policy) and `finish` (its
figures, the held-out evaluation of its policy, and the round marked done). The gate between them
is `evolve.heldout`'s `promote`; every other stage is declared in the package whose code it runs.

Each is idempotent: killed at any point and run again, it finds what is already stored (the
round, the figures) and does only the rest.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from critics.stages import CalibratedJson
from curation.stages import CuratedJson
from evolve.heldout import evaluate_policy, heldout_queries
from evolve.lifecycle import close_round, open_round
from evolve.ownership import foreign_round, loop_round
from evolve.report import RoundFigures, tally_episodes
from evolve.spine import Spine
from publish.stages import Published
from querygen.revisits import revisit_rates
from rollout.stages import EXPLORER, GUIDED, Rolled
from storage.db import transaction
from storage.llm_cache import calls_per_step
from storage.models import Episode, Round, Sample
from storage.models import Policy as PolicyRow
from storage.policies import register_policy
from storage.rounds import REPORTS
from trajforge.endpoints import charge_round
from trajforge.errors import ConfigError
from trajforge.families import get_family
from trajforge.settings import Settings
from trajforge.stage import DEVICES, MODEL_CALLS, Facts, Given, Stage


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


def start_round(spine: Spine, number: int, _given: Given) -> Facts:
    """Open round `number` with its policy (idempotent); say whether it is already done."""
    settings = spine.settings
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
        done = row.status == "done"
        stats = {k: v for k, v in (row.stats or {}).items() if k != REPORTS} if done else {}
    opened = {
        "round": number,
        "round_id": row.id,
        "policy": f"{policy.name}@{policy.version}",
        "done": done,
        "stats": stats,
    }
    return Facts(opened, f"round {number}: policy {opened['policy']}" + (" (done)" if done else ""))


def round_stats(spine: Spine, number: int) -> dict[str, Any]:
    """Success of the round's own policy (guided demonstrations apart), per app too."""
    rnd = spine.round(number)
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


def finish_round(spine: Spine, number: int, extra: dict[str, Any]) -> dict[str, Any]:
    """Mark the round done with its figures (the report reads them), its policy's held-out ones too,
    and its model calls per rolled-out step by stage (before the held-out evaluation's calls)."""
    stats = round_stats(spine, number) | extra
    with spine.sessions() as s:
        stats["calls_per_step"] = calls_per_step(s, spine.round(number).id)
    if spine.settings.evolve.heldout_per_app:
        rnd = spine.round(number)
        with charge_round(rnd.id):
            stats["heldout"] = evaluate_policy(spine, rnd.policy_id, heldout_queries(spine))
    close_round(spine, number, stats)
    return stats


def finished_rounds(spine: Spine) -> int:
    """How many rounds, 1..N without a gap, are done."""
    with spine.sessions() as s:
        done = set(s.scalars(select(Round.number).where(Round.status == "done")))
    n = 0
    while n + 1 in done:
        n += 1
    return n


def round_extra(policy: str, given: Given) -> dict[str, Any]:
    """What the round's policy and the earlier stages' reports add to the round's figures."""
    published: Published = given["publish"]
    curated: CuratedJson = given["curate"]
    calibrated: CalibratedJson = given["calibrate"]
    rolled: Rolled = given["rollout"]
    promoted = given["promote"]
    return {
        "policy": policy,
        "dataset": published["dataset"],
        "dataset_version": published["version"],
        "manifest_sha256": published["manifest_sha256"],
        "next_policy": promoted["policy"],
        "promotion": promoted,
        "consensus": calibrated["consensus"],
        "dedup": curated["dedup"],
        "curriculum": {**curated["curriculum"], "explored": given["explore"]},
        "recovery": curated["recovery"],
        "encoder": given["encoder"],
        "rollout_steps": rolled["steps"],
    }


def finish(spine: Spine, number: int, given: Given) -> Facts:
    """The round done, with its figures and the earlier stages' (`round_extra`)."""
    with spine.sessions() as s:
        policy = s.get(PolicyRow, spine.round(number).policy_id)
        assert policy is not None
    stats = finish_round(spine, number, round_extra(f"{policy.name}@{policy.version}", given))
    return Facts(stats, f"round {number} done: {stats['successes']}/{stats['episodes']} successful")


START: Stage[Spine] = Stage("start", "start-round", start_round, writes=("round", "policy"), resumable=False)
FINISH: Stage[Spine] = Stage(
    "finish",
    "finish-round",
    finish,
    reads=("episode", "sample", "dataset_version"),
    writes=("round",),
    after=("publish",),
    needs=("rollout", "explore", "calibrate", "encoder", "curate", "publish", "promote"),
    tags=(DEVICES, MODEL_CALLS),
    resumable=False,
)
