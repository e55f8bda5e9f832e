"""mark rounds extracted before the `extracted` stage mark existed (publish now requires it)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ROUND = sa.table("round", sa.column("id", sa.Integer), sa.column("stats", sa.JSON))
_SAMPLE = sa.table("sample", sa.column("round_id", sa.Integer))


def upgrade() -> None:
    """A round with samples was extracted: give it the mark extraction now leaves."""
    conn = op.get_bind()
    extracted = sa.select(_SAMPLE.c.round_id).where(_SAMPLE.c.round_id.is_not(None)).distinct()
    rows = conn.execute(sa.select(_ROUND.c.id, _ROUND.c.stats).where(_ROUND.c.id.in_(extracted))).all()
    for round_id, stats in rows:
        stats = json.loads(stats) if isinstance(stats, str) else dict(stats or {})
        stages = dict(stats.get("stages") or {})
        if "extracted" in stages:
            continue
        stages["extracted"] = stages.get("judged", "before-0011")
        stats["stages"] = stages
        conn.execute(sa.update(_ROUND).where(_ROUND.c.id == round_id).values(stats=stats))


def downgrade() -> None:
    """The mark is harmless to older code: nothing to undo."""
