"""Model calls per rolled-out step, by stage: what the round line, rounds.json and status show."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from storage.db import transaction
from storage.llm_cache import calls_per_step, per_step_line
from storage.models import Episode, LLMCall, Step
from tests.support.spine import seed_episodes


def test_calls_per_rolled_out_step_by_stage(sessions: sessionmaker[Session]) -> None:
    ids = seed_episodes(sessions, 2)
    with transaction(sessions) as s:
        round_id = s.get(Episode, ids[0]).round_id  # type: ignore[union-attr]
        assert calls_per_step(s, round_id) == {}  # no step, no call: nothing to divide
        s.add_all(
            Step(episode_id=e, index=i, screenshot="a" * 64, width=10, height=20)
            for e in ids
            for i in range(4)
        )
        calls = ["policy"] * 8 + ["critic.episode"] * 2 + ["guidance.write"]
        s.add_all(
            LLMCall(request_hash=f"{n:064d}", stage=stage, round_id=round_id, model="m", response_text="")
            for n, stage in enumerate(calls)
        )
        s.add(LLMCall(request_hash="f" * 64, stage="policy", round_id=None, model="m", response_text=""))
    with sessions() as s:
        per_step = calls_per_step(s, round_id)
    assert per_step == {"critic.episode": 0.25, "guidance.write": 0.125, "policy": 1.0, "all": 1.375}
    assert per_step_line(per_step) == "1.38 (policy 1.00, critic.episode 0.25, guidance.write 0.12)"
