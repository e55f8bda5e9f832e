"""a round's stages are recorded in one place, the runner's reports: the old `stats.stages` marks go

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-30
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ROUND = sa.table(
    "round", sa.column("id", sa.Integer), sa.column("status", sa.String), sa.column("stats", sa.JSON)
)
_STAGE_OF_MARK = {"judged": "judge", "extracted": "calibrate", "curated": "curate"}


def upgrade() -> None:
    """A finished round's marks become reports of the stages they stood for, where the round keeps
    none, so publishing still seals it; an unfinished round's marks are dropped, and the loop runs
    those stages again when it resumes the round (every stage is idempotent: nothing stored is redone).
    """
    conn = op.get_bind()
    for round_id, status, stats in conn.execute(sa.select(_ROUND.c.id, _ROUND.c.status, _ROUND.c.stats)):
        stats = json.loads(stats) if isinstance(stats, str) else dict(stats or {})
        marks = stats.pop("stages", None)
        if marks is None:
            continue
        reports = dict(stats.get("reports") or {})
        if status == "done":
            for mark, at in marks.items():
                if mark in _STAGE_OF_MARK:
                    reports.setdefault(_STAGE_OF_MARK[mark], {"marked": at, "migrated": "0014"})
        stats["reports"] = reports
        conn.execute(sa.update(_ROUND).where(_ROUND.c.id == round_id).values(stats=stats))


def downgrade() -> None:
    """Older code reads the marks: give a round one for each stage it has a report of."""
    conn = op.get_bind()
    for round_id, stats in conn.execute(sa.select(_ROUND.c.id, _ROUND.c.stats)):
        stats = json.loads(stats) if isinstance(stats, str) else dict(stats or {})
        reports = stats.get("reports") or {}
        marks = {mark: "0014" for mark, stage in _STAGE_OF_MARK.items() if stage in reports}
        if marks:
            stats["stages"] = marks
            conn.execute(sa.update(_ROUND).where(_ROUND.c.id == round_id).values(stats=stats))
