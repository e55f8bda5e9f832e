"""Alembic environment: the engine comes from trajforge (`storage.db.upgrade`)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Engine

from storage.models import Base

config = context.config
engine = config.attributes.get("engine")
if not isinstance(engine, Engine):  # pragma: no cover - only run through storage.db
    raise RuntimeError("run migrations with `trajforge db upgrade`, which passes the engine")

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
