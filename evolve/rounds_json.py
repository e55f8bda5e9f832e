"""`rounds.json`: the report's figures for machines, per round, overall and per app.

Keys (documented in the README): `rounds[]` with `round`, `policy`, `status`,
`dataset_version`, `overall` and `apps.<name>`; each of the last two holds `episodes`,
`successes`, `success_rate` (the round's own policy on the round's new queries, revisits
apart, by the episode's recorded outcome),
`accuracy` (per critic `name:version`: n, accuracy, precision, recall against the deciding
anchor), `outcome_sources` (episodes whose samples took their outcome from the verifier, a
human or the calibrated critic, plus those left undecided, by reason), `samples` (kept and
dropped counts) and `dropped` (by reason). `revisits` lists the round's revisited queries
(`evolve.revisits`): `query`, `app`, `before` (pass rate when it got guidance) and `after`.
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

import json
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from critics.outcomes import deciding_anchor
from evolve.revisits import revisited
from storage.anchors import anchors_by_episode
from storage.models import Episode, Exclusion, Judgment, Policy, Round, Sample
from storage.models import Query as QueryRow
from storage.samples import OUTCOME_STAGE
from trajforge.metrics import ChannelStats
from trajforge.verdicts import SILENT

OVERALL = "overall"


class _Tally:
    def __init__(self) -> None:
        self.episodes = 0
        self.successes = 0
        self.channels: dict[str, ChannelStats] = {}
        self.sources: Counter[str] = Counter()
        self.samples: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()

    @property
    def success_rate(self) -> float:
        return round(self.successes / self.episodes, 4) if self.episodes else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "episodes": self.episodes,
            "successes": self.successes,
            "success_rate": self.success_rate,
            "accuracy": {k: v.summary() for k, v in sorted(self.channels.items())},
            "outcome_sources": dict(self.sources),
            "samples": dict(self.samples),
            "dropped": dict(self.dropped),
        }


def _round(s: Session, rnd: Round) -> dict[str, Any]:
    tallies: dict[str, _Tally] = {OVERALL: _Tally()}
    episodes = s.execute(
        select(
            Episode.id,
            Episode.uid,
            Episode.outcome,
            Episode.policy_id,
            QueryRow.goal,
            QueryRow.uid,
            QueryRow.meta,
        )
        .join(QueryRow, QueryRow.id == Episode.query_id)
        .where(Episode.round_id == rnd.id)
    ).all()
    app_of = {eid: str(goal.get("app", "")) for eid, _, _, _, goal, _, _ in episodes}
    by_uid = {uid: eid for eid, uid, _, _, _, _, _ in episodes}
    revisits = set(revisited(rnd))
    tiers: dict[str, _Tally] = {}

    def add(episode_id: int) -> list[_Tally]:
        return [tallies[OVERALL], tallies.setdefault(app_of[episode_id], _Tally())]

    for eid, _, outcome, policy_id, _, query, meta in episodes:
        if policy_id == rnd.policy_id and query not in revisits:  # success: new queries only
            tier = tiers.setdefault(str((meta or {}).get("tier") or "unknown"), _Tally())
            for t in [*add(eid), tier]:
                t.episodes += 1
                t.successes += outcome == "success"
    anchors = anchors_by_episode(s, Episode.round_id == rnd.id)
    verdicts: dict[int, list[Judgment]] = {}
    for j in s.scalars(
        select(Judgment).where(Judgment.target == "episode", Judgment.target_id.in_(list(app_of)))
    ):
        verdicts.setdefault(j.target_id, []).append(j)
    for eid, found in anchors.items():
        decided = deciding_anchor(found)
        if decided is None:
            continue
        for j in verdicts.get(eid, []):
            if j.label in SILENT:
                continue
            for t in add(eid):
                stats = t.channels.setdefault(f"{j.critic}:{j.critic_version}", ChannelStats())
                stats.add(j.label == "correct", decided.label == "success")
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
        for t in add(eid):
            t.sources[where] += 1
    for sample_episode, status, why, n in s.execute(
        select(Sample.episode_id, Sample.status, Sample.reason, func.count())
        .where(Sample.round_id == rnd.id)
        .group_by(Sample.episode_id, Sample.status, Sample.reason)
    ):
        owner = sample_episode if sample_episode in app_of else None
        for t in add(owner) if owner is not None else [tallies[OVERALL]]:
            t.samples[status] += n
            if status != "kept":
                t.dropped[why or "dropped"] += n
    policy = s.get(Policy, rnd.policy_id)
    overall = tallies.pop(OVERALL)
    return {
        "round": rnd.number,
        "policy": f"{policy.name}@{policy.version}" if policy else None,
        "status": rnd.status,
        "dataset_version": (rnd.stats or {}).get("dataset_version"),
        "revisits": (rnd.stats or {}).get("revisit_rates", []),
        "tiers": {
            t: {"episodes": v.episodes, "success_rate": v.success_rate} for t, v in sorted(tiers.items())
        },
        "curriculum": (rnd.stats or {}).get("curriculum", {}),
        "recovery": (rnd.stats or {}).get("recovery"),
        "heldout": (rnd.stats or {}).get("heldout"),
        "promotion": (rnd.stats or {}).get("promotion"),
        OVERALL: overall.as_dict(),
        "apps": {app: t.as_dict() for app, t in sorted(tallies.items())},
    }


def rounds_table(sessions: sessionmaker[Session]) -> dict[str, Any]:
    with sessions() as s:
        return {"rounds": [_round(s, rnd) for rnd in s.scalars(select(Round).order_by(Round.number))]}


def write_rounds_json(sessions: sessionmaker[Session], out: Path) -> Path:
    path = out / "rounds.json"
    path.write_text(json.dumps(rounds_table(sessions), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
