"""query pass-rate labels per round, for the curriculum and the zero-pass hold-out

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "query_pass_rate",
        sa.Column("query_id", _ID, nullable=False),
        sa.Column("round_id", _ID, nullable=False),
        sa.Column("rollouts", sa.Integer(), nullable=False),
        sa.Column("successes", sa.Integer(), nullable=False),
        sa.Column("solved", sa.Boolean(), nullable=False),
        sa.Column("tier", sa.String(length=16), nullable=False),
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["query_id"], ["query.id"], name=op.f("fk_query_pass_rate_query_id_query")),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"], name=op.f("fk_query_pass_rate_round_id_round")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_query_pass_rate")),
        sa.UniqueConstraint("query_id", "round_id", name=op.f("uq_query_pass_rate_query_id_round_id")),
    )
    op.create_index(op.f("ix_query_pass_rate_query_id"), "query_pass_rate", ["query_id"])
    op.create_index(op.f("ix_query_pass_rate_round_id"), "query_pass_rate", ["round_id"])


def downgrade() -> None:
    op.drop_table("query_pass_rate")
