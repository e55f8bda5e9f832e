"""The audit of what the critics published: a random sample each round, judged by people apart from
the queue that teaches, measures the realised error of the labels published without a person.

Each round, `critics.audit_size` of the episodes whose outcome the critics decided are drawn at random
(seeded by `critics.audit_seed` and the episode's uid, so a rerun draws the same) and kept in the
round's stats under `AUDIT` with the label the critics published. The review queue sends them, blind,
to their own Label Studio project (`annotation.queue`, reason `audit_published`). Once a person has
judged them, `audit_record` counts how many published labels the person reversed, over every round
so far, with its Wilson 95% interval: the trust table shows it (`overall.audit`) and so do
`rounds.json` and the report. `audited_target` is the target the next decision uses: the
configured `critics.max_label_error`, lowered in proportion where the audit's upper bound has
passed it, so a round after a bad audit decides less by itself.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.anchors import anchors_by_episode
from storage.models import Episode, Round
from trajforge.metrics import wilson
from trajforge.verdicts import AUDIT, Outcome


def draw(decided: dict[int, Outcome], uids: dict[int, str], size: int, seed: int) -> dict[str, bool]:
    """`size` of the episodes the critics decided, at random by a hash of (seed, uid): {id: label}."""
    by_critic = [e for e, o in decided.items() if o.source == "critic" and o.success is not None]
    ranked = sorted(by_critic, key=lambda e: hashlib.sha256(f"{seed}:{uids[e]}".encode()).hexdigest())
    return {str(e): bool(decided[e].success) for e in sorted(ranked[:size])}


def audit_record(s: Session, round_id: int) -> tuple[int, int]:
    """(reversed, judged): the audited episodes of rounds up to `round_id` a person has judged, and
    how many of the critics' published labels the person reversed."""
    number = s.scalar(select(Round.number).where(Round.id == round_id))
    published: dict[int, bool] = {}
    for (stats,) in s.execute(select(Round.stats).where(Round.number <= (number or 0))):
        published |= {int(e): bool(label) for e, label in ((stats or {}).get(AUDIT) or {}).items()}
    if not published:
        return 0, 0
    found = anchors_by_episode(s, Episode.id.in_(list(published)))
    wrong = judged = 0
    for episode_id, anchors in found.items():
        human = [a for a in anchors if a.source == "human"]
        if human:
            judged += 1
            wrong += (human[-1].label == "success") != published[episode_id]
    return wrong, judged


def upper_bound(wrong: int, n: int) -> float | None:
    """The Wilson 95% upper bound of an error rate of `wrong` in `n` (None when n is 0)."""
    interval = wilson(wrong, n)
    return None if interval is None else interval[1]


def audited_target(target: float, record: tuple[int, int]) -> float:
    """The target a decision uses: `target`, times target / the audit's upper bound where that passed it."""
    upper = upper_bound(*record)
    return target if upper is None or upper <= target else target * target / upper


def summary(record: tuple[int, int], target: float) -> dict[str, Any]:
    """The audit as the trust table shows it: the realised error with its interval, and the target used."""
    wrong, n = record
    return {
        "reversed": wrong,
        "judged": n,
        "error": round(wrong / n, 4) if n else None,
        "interval": wilson(wrong, n),
        "target_used": round(audited_target(target, record), 4),
    }
