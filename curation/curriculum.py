"""Pass-rate labels and the zero-pass hold-out (Step-GUI §2.1.3).

Every curated round labels each query it rolled out (`query_pass_rate`): the round's own
policy's decided rollouts and successes, whether any rollout of the query (a guided
demonstration or a revisit too) has succeeded so far, and a tier:

- `unsolved`: no rollout of the query has ever succeeded;
- `hard`: pass rate at or below `curate.guidance_pass_rate`;
- `easy`: pass rate above `curate.high_pass_rate`;
- `medium`: the rest.

Zero-pass hold-out ("zero pass-rate samples, which mix noisy annotations and genuinely hard
cases, are excluded from early training"): the action samples (rows with a target action)
of a query not yet solved get status `held`, reason `zero_pass`, so no published version
holds them. When a later round solves the query (usually a revisit with its guidance), its
held samples are released: kept again, with `released_in_round` in their provenance, so the
next version trains on them. `curate.hold_zero_pass: false` turns the hold-out off.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from curation.rollouts import Rollout
from storage.db import transaction
from storage.models import Episode, QueryPassRate, Round, Sample
from storage.models import Query as QueryRow
from trajforge.stage_settings import CurationSettings

HELD, ZERO_PASS = "held", "zero_pass"
PASS_TIERS = ("unsolved", "hard", "medium", "easy")  # by pass rate (complexity tiers: trajforge.domain.TIERS)


def tier_of(rate: float, solved: bool, settings: CurationSettings) -> str:
    if not solved:
        return "unsolved"
    if rate <= settings.guidance_pass_rate:
        return "hard"
    return "easy" if rate > settings.high_pass_rate else "medium"


@dataclass
class CurriculumReport:
    tiers: Counter[str] = field(default_factory=Counter)  # queries of the round by tier
    held: int = 0  # action samples of unsolved queries held out this round
    released: int = 0  # held samples of earlier rounds released because their query is now solved

    def as_dict(self) -> dict[str, object]:
        return {
            "tiers": {t: self.tiers[t] for t in PASS_TIERS if self.tiers[t]},
            "held": self.held,
            "released": self.released,
        }

    def render(self) -> str:
        tiers = ", ".join(f"{t}={self.tiers[t]}" for t in PASS_TIERS if self.tiers[t]) or "none"
        return f"pass-rate tiers: {tiers}; zero-pass hold-out: {self.held} held, {self.released} released"


def curriculum_line(stats: dict[str, Any]) -> str:
    """One line of a round's curriculum stats (the curate step's `curriculum`)."""
    tiers = ", ".join(f"{t} {n}" for t, n in stats.get("tiers", {}).items()) or "none"
    mix = stats.get("tier_mix")
    wanted = ", ".join(f"{t} {share:.0%}" for t, share in mix.items()) if mix else "as sampled"
    explored = stats.get("explored") or {}
    exploring = (
        f"; exploration: {explored.get('episodes', 0)} explorer rollouts on {explored['queries']} queries "
        f"of unsolved apps, {explored.get('successes', 0)} solved"
        if explored.get("queries")
        else ""
    )
    held, released = stats.get("held", 0), stats.get("released", 0)
    return (
        f"new queries' tier mix {wanted}; queries by pass rate: {tiers}; "
        f"zero-pass action samples held {held}, released {released}{exploring}"
    )


def label_and_hold(
    sessions: sessionmaker[Session],
    round_id: int,
    groups: dict[str, list[Rollout]],
    settings: CurationSettings,
) -> CurriculumReport:
    """Store the round's pass-rate labels, then hold out or release action samples (safe to rerun)."""
    report = CurriculumReport()
    with transaction(sessions) as s:
        rnd = s.get(Round, round_id)
        assert rnd is not None
        ids: dict[str, int] = dict(
            s.execute(select(QueryRow.uid, QueryRow.id).where(QueryRow.uid.in_(list(groups)))).tuples().all()
        )
        own = set(
            s.scalars(
                select(Episode.id).where(Episode.round_id == round_id, Episode.policy_id == rnd.policy_id)
            )
        )
        solved_before = set(
            s.scalars(
                select(QueryPassRate.query_id)
                .join(Round, Round.id == QueryPassRate.round_id)
                .where(
                    QueryPassRate.solved,
                    Round.number < rnd.number,
                    QueryPassRate.query_id.in_(list(ids.values())),
                )
            )
        )
        labels = {
            row.query_id: row
            for row in s.scalars(select(QueryPassRate).where(QueryPassRate.round_id == round_id))
        }
        unsolved: list[int] = []
        newly_solved: list[int] = []
        for uid, group in groups.items():
            qid = ids[uid]
            decided = [r.success for r in group if r.episode_id in own and r.success is not None]
            wins = sum(bool(x) for x in decided)
            solved = qid in solved_before or any(r.success for r in group)
            tier = tier_of(wins / len(decided) if decided else 0.0, solved, settings)
            report.tiers[tier] += 1
            row = labels.get(qid) or QueryPassRate(query_id=qid, round_id=round_id)
            row.rollouts, row.successes, row.solved, row.tier = len(decided), wins, solved, tier
            s.add(row)
            if not solved:
                unsolved.append(qid)
            elif qid not in solved_before:
                newly_solved.append(qid)
        if settings.hold_zero_pass:
            report.held = _set_status(s, unsolved, "kept", HELD, round_id=round_id)
            report.released = _set_status(s, newly_solved, HELD, "kept", released_in=rnd.number)
    return report


def _set_status(
    s: Session,
    query_ids: list[int],
    old: str,
    new: str,
    *,
    round_id: int | None = None,
    released_in: int | None = None,
) -> int:
    """Move the action samples of these queries from status `old` to `new`; how many moved."""
    if not query_ids:
        return 0
    stmt = (
        select(Sample)
        .join(Episode, Episode.id == Sample.episode_id)
        .where(Episode.query_id.in_(query_ids), Sample.status == old)
    )
    if round_id is not None:
        stmt = stmt.where(Sample.round_id == round_id)
    moved = 0
    for sample in s.scalars(stmt):
        if sample.payload.get("action") is None or (new == "kept" and sample.reason != ZERO_PASS):
            continue
        sample.status, sample.reason = new, (ZERO_PASS if new == HELD else None)
        if released_in is not None:
            sample.provenance = {**sample.provenance, "released_in_round": released_in}
        moved += 1
    return moved
