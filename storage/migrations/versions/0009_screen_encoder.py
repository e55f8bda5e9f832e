"""screen encoders trained on the store's screenshots, for trajectory dedup

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "screen_encoder",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=256), nullable=False),
        sa.Column("round_id", _ID, nullable=True),
        sa.Column("facts", _JSON, nullable=False),
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"], name=op.f("fk_screen_encoder_round_id_round")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_screen_encoder")),
        sa.UniqueConstraint("sha256", name=op.f("uq_screen_encoder_sha256")),
    )


def downgrade() -> None:
    op.drop_table("screen_encoder")
