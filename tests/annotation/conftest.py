"""A judged, curated smoke round on whatever database the environment names."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.db import engine_from_settings, session_factory
from storage.models import Round
from tests.support import smoke
from trajforge.settings import Settings, load_settings


def smoke_round(rollouts: int) -> tuple[Settings, sessionmaker[Session], int]:
    """Round 1 (one query per app, `rollouts` each): settings, sessions and the round id."""
    settings = load_settings()
    smoke.smoke_round(settings, queries_per_app=1, rollouts=rollouts)
    sessions = session_factory(engine_from_settings(settings))
    with sessions() as s:
        round_id = s.scalars(select(Round.id).where(Round.number == 1)).one()
    return settings, sessions, round_id
