"""The operator's view of a loop: which round runs and who runs it, the device pool's health
and leases, and what the last rounds did (`trajforge status`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sqlalchemy import func, select

from evolve.spine import open_spine
from rollout.loop import open_pool
from rollout.pool import DeviceState
from storage.llm_cache import per_step_line
from storage.locks import LOOP_LOCK, holder
from storage.models import Episode, Exclusion, Round
from trajforge.logs import counts
from trajforge.settings import Settings

RECENT = 3  # finished rounds shown


@dataclass
class LoopStatus:
    dataset: str
    running_by: str | None  # the loop lock's holder
    open_rounds: list[tuple[int, str, int]] = field(default_factory=list)  # number, status, episodes
    recent: list[tuple[int, str]] = field(default_factory=list)  # number, one-line summary
    devices: list[DeviceState] = field(default_factory=list)
    attempt_failures: Counter[str] = field(default_factory=Counter)  # of the open rounds

    def lines(self) -> list[str]:
        health = Counter(d.health for d in self.devices)
        leased = sum(len(d.holders) for d in self.devices)
        slots = sum(d.capacity for d in self.devices)
        out = [
            f"loop (dataset {self.dataset}): "
            + (f"running in {self.running_by}" if self.running_by else "no run in progress"),
            *(
                f"round {n}: {status} ({episodes} episodes stored so far)"
                for n, status, episodes in self.open_rounds
            ),
            *(f"round {n}: done: {line}" for n, line in self.recent),
            f"devices: {len(self.devices)} ({counts(health) if health else 'none registered'}); "
            f"leases: {leased}/{slots} slots held",
        ]
        for d in self.devices:
            if d.health != "healthy" or d.failures:
                since = f" since {d.down_since:%Y-%m-%d %H:%M:%S} UTC" if d.down_since else ""
                out.append(f"  {d.name} ({d.backend}): {d.health}, {d.failures} failures in a row{since}")
        if self.attempt_failures:
            out.append(f"device failures in open rounds: {counts(self.attempt_failures)}")
        return out


def loop_status(settings: Settings) -> LoopStatus:
    spine = open_spine(settings)
    engine = spine.sessions.kw["bind"]
    status = LoopStatus(settings.evolve.dataset, holder(engine, LOOP_LOCK))
    with spine.sessions() as s:
        rounds = s.scalars(select(Round).order_by(Round.number)).all()
        stored = dict(
            s.execute(select(Episode.round_id, func.count()).group_by(Episode.round_id)).tuples().all()
        )
        open_ids = [r.id for r in rounds if r.status != "done"]
        failures = s.execute(
            select(Exclusion.reason, func.count())
            .where(Exclusion.round_id.in_(open_ids), Exclusion.item_type == "episode_attempt")
            .group_by(Exclusion.reason)
        ).tuples()
        status.attempt_failures.update(dict(failures.all()))
    for r in rounds:
        if r.status != "done":
            status.open_rounds.append((r.number, r.status, stored.get(r.id, 0)))
    for r in [r for r in rounds if r.status == "done"][-RECENT:]:
        status.recent.append((r.number, _summary(r)))
    status.devices = open_pool(spine).devices()
    return status


def _summary(row: Round) -> str:
    stats = row.stats or {}
    made_by = stats.get("made_by")
    if made_by:
        return f"made by {made_by}"
    rate = stats.get("success_rate")
    success = f"success {rate:.0%}" if isinstance(rate, int | float) else "success ?"
    dataset = f"{stats.get('dataset', '?')} v{stats.get('dataset_version', '?')}"
    episodes = stats.get("episodes", "?")
    line = f"{success} of {episodes} episodes; dataset {dataset}; next {stats.get('next_policy', '?')}"
    per_step = stats.get("calls_per_step")
    return f"{line}; model calls per step {per_step_line(per_step)}" if per_step else line
