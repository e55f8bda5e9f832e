"""`rounds.json`: the report's figures for machines, per round, overall and per app.

Keys (documented in docs/running.md): `rounds[]` with `round`, `policy`, `status`,
`dataset_version`, `overall` and `apps.<name>`; each of the last two holds `episodes`,
`successes`, `success_rate` (the round's own policy on the round's new queries, revisits
apart, by the episode's recorded outcome),
`accuracy` (per critic `name:version`: n, accuracy, precision, recall against the deciding
anchor), `outcome_sources` (episodes whose samples took their outcome from the verifier, a
human or the calibrated critic, plus those left undecided, by reason), `samples` (kept and
dropped counts) and `dropped` (by reason); `model_faults` counts the episodes a failed policy call
ended, which are not episodes (a round whose every call failed has `success_rate` null, not 0).
`model` holds the round's paid model calls by stage and in all (calls, retries, tokens, cost).
`calibration` (in `overall` and each app) is the critics' trust table of the round (`critics.trust`):
`n`, `decided`, `precision`, `npv`, `accuracy` and `coverage` (each `value`, `right`, `of` and a
Wilson 95% `interval`; `value` null where undefined), `labels` and, per app, `labels_needed`; in
`overall` under `critics.trust: error`, `claimed_error` (the upper bound of the published labels'
error, null when nothing was decided) and `max_label_error`, and `audit` (`reversed` of `judged`
audited labels, the realised `error` with its Wilson `interval`, and `target_used` next).
`revisits` lists the round's revisited queries (`querygen.revisits`): `query`, `app`, `before`
(pass rate when it got guidance) and `after`.
`tiers` gives the new queries' episodes and success rate per complexity tier
(`querygen.complexity`); `curriculum` the tier mix asked for (`evolve.tier_mix`), the
queries per pass-rate tier and the samples held out or released (`curation.curriculum`).
`recovery` counts the error-recovery probes (`curation.recovery`): `prone_steps`, `probed`,
`samples` by category, `skipped` by reason, and `coincident` (what the pixel-coincidence method
would have paired on the same rollouts).
`heldout` is the round's policy on the fixed held-out set (`evolve.heldout`): `episodes`,
`successes`, `unknown`, `success_rate` and `per_app` ([successes, episodes]); `promotion` the
gate's decision on the policy trained after the round (`promoted`, `reason`, and the `current`
and `candidate` policies' held-out figures).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from critics.trust import TRUST
from querygen.revisits import revisited
from rollout.records import MODEL_FAULTS
from storage.anchors import anchors_by_episode, deciding_anchor
from storage.llm_cache import failures_by_stage, stage_usage
from storage.models import Episode, Exclusion, Judgment, Policy, Round, Sample
from storage.models import Query as QueryRow
from storage.samples import OUTCOME_STAGE
from trajforge.gateway import StageUsage
from trajforge.metrics import ChannelStats
from trajforge.verdicts import SILENT

OVERALL = "overall"


class _Tally:
    def __init__(self) -> None:
        self.episodes = 0
        self.successes = 0
        self.model_faults = 0
        self.channels: dict[str, ChannelStats] = {}
        self.sources: Counter[str] = Counter()
        self.samples: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()

    @property
    def success_rate(self) -> float | None:
        return round(self.successes / self.episodes, 4) if self.episodes else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "episodes": self.episodes,
            "successes": self.successes,
            "success_rate": self.success_rate,
            "model_faults": self.model_faults,
            "accuracy": {k: v.summary() for k, v in sorted(self.channels.items())},
            "outcome_sources": dict(self.sources),
            "samples": dict(self.samples),
            "dropped": dict(self.dropped),
        }


@dataclass
class _RoundTallies:
    """A round's tallies, overall and per app, as its episodes, verdicts and samples are read."""

    app_of: dict[int, str]  # episode id -> app
    tallies: dict[str, _Tally] = field(default_factory=lambda: {OVERALL: _Tally()})
    tiers: dict[str, _Tally] = field(default_factory=dict)

    def of(self, episode_id: int | None) -> list[_Tally]:
        """The tallies an episode counts in: overall and its app's (only overall for none)."""
        if episode_id is None or episode_id not in self.app_of:
            return [self.tallies[OVERALL]]
        return [self.tallies[OVERALL], self.tallies.setdefault(self.app_of[episode_id], _Tally())]

    def successes(self, rnd: Round, episodes: Sequence[Any]) -> None:
        """Success of the round's own policy on its new queries (revisits and guided demos apart)."""
        revisits = set(revisited(rnd))
        for eid, _, outcome, policy_id, _, query, meta, reason in episodes:
            if policy_id == rnd.policy_id and query not in revisits:
                tier = self.tiers.setdefault(str((meta or {}).get("tier") or "unknown"), _Tally())
                for t in [*self.of(eid), tier]:
                    faulted = reason in MODEL_FAULTS  # the endpoint failed: no outcome to count
                    t.model_faults += faulted
                    t.episodes += not faulted
                    t.successes += outcome == "success" and not faulted

    def channels(self, s: Session, rnd: Round) -> None:
        """Each critic channel against the deciding anchor, on the anchored episodes."""
        verdicts: dict[int, list[Judgment]] = {}
        for j in s.scalars(
            select(Judgment).where(Judgment.target == "episode", Judgment.target_id.in_(list(self.app_of)))
        ):
            verdicts.setdefault(j.target_id, []).append(j)
        for eid, found in anchors_by_episode(s, Episode.round_id == rnd.id).items():
            if (decided := deciding_anchor(found)) is None:
                continue
            for j in verdicts.get(eid, []):
                if j.label not in SILENT:
                    for t in self.of(eid):
                        stats = t.channels.setdefault(f"{j.critic}:{j.critic_version}", ChannelStats())
                        stats.add(j.label == "correct", decided.label == "success")

    def sources(self, s: Session, rnd: Round, by_uid: dict[str, int]) -> None:
        """Where each episode's outcome came from, or why it has none."""
        sourced: dict[int, str] = {}
        for eid, provenance in s.execute(
            select(Sample.episode_id, Sample.provenance).where(
                Sample.round_id == rnd.id, Sample.episode_id.is_not(None), Sample.category == "state_summary"
            )
        ):
            sourced.setdefault(eid, str((provenance.get("anchor") or {}).get("source", "none")))
        for uid, reason in s.execute(
            select(Exclusion.item_key, Exclusion.reason).where(
                Exclusion.round_id == rnd.id, Exclusion.stage == OUTCOME_STAGE
            )
        ):
            if uid in by_uid:
                sourced[by_uid[uid]] = f"undecided:{reason}"
        for eid, where in sourced.items():
            for t in self.of(eid):
                t.sources[where] += 1

    def samples(self, s: Session, rnd: Round) -> None:
        """Samples by status, and the dropped ones by reason."""
        for sample_episode, status, why, n in s.execute(
            select(Sample.episode_id, Sample.status, Sample.reason, func.count())
            .where(Sample.round_id == rnd.id)
            .group_by(Sample.episode_id, Sample.status, Sample.reason)
        ):
            for t in self.of(sample_episode):
                t.samples[status] += n
                if status != "kept":
                    t.dropped[why or "dropped"] += n


def _round(s: Session, rnd: Round) -> dict[str, Any]:
    episodes = s.execute(
        select(
            Episode.id,
            Episode.uid,
            Episode.outcome,
            Episode.policy_id,
            QueryRow.goal,
            QueryRow.uid,
            QueryRow.meta,
            Episode.reason,
        )
        .join(QueryRow, QueryRow.id == Episode.query_id)
        .where(Episode.round_id == rnd.id)
    ).all()
    tally = _RoundTallies({eid: str(goal.get("app", "")) for eid, _, _, _, goal, _, _, _ in episodes})
    tally.successes(rnd, episodes)
    tally.channels(s, rnd)
    tally.sources(s, rnd, {uid: eid for eid, uid, _, _, _, _, _, _ in episodes})
    tally.samples(s, rnd)
    policy = s.get(Policy, rnd.policy_id)
    overall = tally.tallies.pop(OVERALL)
    stats = rnd.stats or {}
    trust = stats.get(TRUST) or {}  # the critics' calibration per task (`critics.trust`)
    return {
        "round": rnd.number,
        "policy": f"{policy.name}@{policy.version}" if policy else None,
        "status": rnd.status,
        "dataset_version": stats.get("dataset_version"),
        "revisits": stats.get("revisit_rates", []),
        "tiers": {
            t: {"episodes": v.episodes, "success_rate": v.success_rate}
            for t, v in sorted(tally.tiers.items())
        },
        "curriculum": stats.get("curriculum", {}),
        "recovery": stats.get("recovery"),
        "heldout": stats.get("heldout"),
        "promotion": stats.get("promotion"),
        # per rolled-out step as the round recorded it when it finished (before held-out calls)
        "model": model_usage(s, rnd.id) | {"per_step": stats.get("calls_per_step", {})},
        OVERALL: overall.as_dict() | {"calibration": trust.get(OVERALL)},
        "apps": {
            app: t.as_dict() | {"calibration": trust.get(app)} for app, t in sorted(tally.tallies.items())
        },
    }


def model_usage(s: Session, round_id: int) -> dict[str, Any]:
    """The round's paid model calls (`llm_call`), per stage and in all: calls, retries, tokens, cost,
    and the requests still failing (`llm_failure`), with their reasons."""
    stages = {stage: dataclasses.asdict(u) for stage, u in stage_usage(s, round_id).items()}
    failures = failures_by_stage(s, round_id)
    for stage in failures.keys() - stages.keys():
        stages[stage] = dataclasses.asdict(StageUsage())
    for stage, u in stages.items():
        del u["cached"]  # the ledger holds paid calls only
        u["cost_usd"] = round(u["cost_usd"], 6)
        u["failed"] = sum(failures.get(stage, {}).values())
        u["failures"] = dict(sorted(failures.get(stage, {}).items()))
    keys = ("calls", "failed", "retries", "prompt_tokens", "completion_tokens", "cost_usd")
    totals = {k: round(sum(u[k] for u in stages.values()), 6) for k in keys}
    return {"stages": stages, **totals}


def rounds_table(sessions: sessionmaker[Session]) -> dict[str, Any]:
    with sessions() as s:
        return {"rounds": [_round(s, rnd) for rnd in s.scalars(select(Round).order_by(Round.number))]}


def write_rounds_json(sessions: sessionmaker[Session], out: Path) -> Path:
    path = out / "rounds.json"
    path.write_text(json.dumps(rounds_table(sessions), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
