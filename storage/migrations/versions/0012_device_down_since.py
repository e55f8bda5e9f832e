"""device.down_since: when a device last went down (failed, retired or started a probe)

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Devices down before this column existed count as down long ago: the next lease probes them."""
    with op.batch_alter_table("device") as batch:
        batch.add_column(sa.Column("down_since", sa.DateTime(timezone=False), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("device") as batch:
        batch.drop_column("down_since")
