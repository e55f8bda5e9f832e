"""The smoke round: the smallest real thing the engine does end to end, until the round flow lands.

For every built-in app it samples new task queries on the app's navigation graph, then
rolls out a scripted policy on the simulated emulator: the oracle's ground-truth actions,
spoken as GUI-Owl `mobile_use` tool calls, with seeded format errors (kept as data with
their reason) and seeded early give-ups (so some episodes fail). Screenshots are stored
once by hash; steps, placeholder screen-change judgments, verifier anchors and every
dropped item are written in bulk.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from querygen.pipeline import generate_queries, load_history, store_generation
from rollout.sim.device import Move
from rollout.sim.env import SimEnv
from rollout.sim.oracle import actions_for
from storage.db import engine_from_settings, insert_ignore, session_factory, transaction, upgrade
from storage.models import Anchor, Episode, Exclusion, Judgment, Policy, Round, Step
from storage.models import Query as QueryRow
from storage.objectstore import open_object_store
from trajforge.actions import Action, ActionKind, get_codec
from trajforge.appspec import builtin_app_names, load_app
from trajforge.domain import Query
from trajforge.errors import ParseError
from trajforge.logs import redact_url
from trajforge.settings import Settings

POLICY = ("scripted-oracle", 0)
CRITIC = ("screen_change", "0")  # a placeholder until the critics issue lands
MALFORMED_RATE = 0.08  # per step: the policy's output is cut off mid-JSON
GIVE_UP_RATE = 0.2  # per episode: the policy stops half-way and reports failure


class ScriptedPolicy:
    """The oracle's next action as a `mobile_use` tool call, with seeded mistakes."""

    def __init__(self, env: SimEnv, query: Query, seed: str) -> None:
        self.codec = get_codec("qwen")
        self.env = env
        self.rng = random.Random(seed)
        self.plan = actions_for(env.device, query.app, [Move.from_json(m) for m in query.path])
        self.give_up_after = len(query.path) // 2 + 1 if self.rng.random() < GIVE_UP_RATE else None
        self.pending: Action | None = None
        self.taken = 0

    def next_output(self) -> str:
        if self.pending is None:
            if self.give_up_after is not None and self.taken >= self.give_up_after:
                self.pending = Action(kind=ActionKind.TERMINATE, status="failure")
            else:
                self.pending = next(self.plan, Action(kind=ActionKind.TERMINATE, status="success"))
        text = self.codec.format(self.pending, self.env.device.size)
        if self.rng.random() < MALFORMED_RATE:
            return text[: len(text) // 2]  # cut off: the action is tried again next step
        self.pending, self.taken = None, self.taken + 1
        return text


@dataclass
class SmokeReport:
    round_number: int
    db_url: str
    store: str
    queries: Counter[str] = field(default_factory=Counter)
    episodes: Counter[str] = field(default_factory=Counter)
    successes: Counter[str] = field(default_factory=Counter)
    steps: int = 0
    frames_written: int = 0
    frames_deduped: int = 0
    labels: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def render(self) -> str:
        total, ok = sum(self.episodes.values()), sum(self.successes.values())
        per_app = ", ".join(f"{a} {self.successes[a]}/{n}" for a, n in sorted(self.episodes.items()))
        return "\n".join(
            [
                f"round {self.round_number}: {sum(self.queries.values())} new queries, {total} episodes, "
                f"{ok} verified successful ({ok / max(total, 1):.0%}), {self.steps} steps",
                f"per app: {per_app}",
                f"screenshots: {self.frames_written} stored, "
                f"{self.frames_deduped} already there (deduplicated by sha256)",
                "step labels: " + ", ".join(f"{k}={v}" for k, v in sorted(self.labels.items())),
                "dropped: " + (", ".join(f"{k}={v}" for k, v in sorted(self.reasons.items())) or "none"),
                f"database: {self.db_url}",
                f"objects:  {self.store}",
            ]
        )


def run_smoke_round(settings: Settings, episodes_per_app: int = 3) -> SmokeReport:
    """One round on the configured database and object store; each call is the next round."""
    engine = engine_from_settings(settings)
    upgrade(engine)
    sessions = session_factory(engine)
    store = open_object_store(settings)
    apps = [load_app(name) for name in builtin_app_names()]
    env = SimEnv(apps, store=store)
    where = settings.s3.endpoint if settings.store.backend == "s3" else str(settings.store_path)
    with transaction(sessions) as s:
        policy_id = _policy(s)
        number = (s.scalar(select(func.max(Round.number))) or 0) + 1
        rnd = Round(number=number, policy_id=policy_id, seed=number)
        s.add(rnd)
        s.flush()
        round_id = rnd.id
    report = SmokeReport(number, redact_url(settings.db_url), f"{settings.store.backend} {where}")
    for spec in apps:
        coverage, dedup = load_history(sessions, spec.name)
        generated = generate_queries(spec, episodes_per_app, seed=number, coverage=coverage, deduper=dedup)
        store_generation(sessions, spec, generated, round_id=round_id)
        report.queries[spec.name] += len(generated.kept)
        report.reasons.update(generated.reasons())
        for query in generated.kept:
            _episode(sessions, env, query, round_id, policy_id, number, report)
    report.frames_written, report.frames_deduped = env.frames_written, env.frames_deduped
    with transaction(sessions) as s:
        finished = s.get(Round, round_id)
        assert finished is not None
        finished.status = "done"
        finished.stats = {
            "episodes": sum(report.episodes.values()),
            "successes": sum(report.successes.values()),
            "steps": report.steps,
            "dropped": dict(report.reasons),
        }
    return report


def _policy(s: Session) -> int:
    name, version = POLICY
    insert_ignore(
        s, Policy, [{"name": name, "version": version, "meta": {"format": "qwen"}}], ["name", "version"]
    )
    return s.scalars(select(Policy.id).where(Policy.name == name, Policy.version == version)).one()


def _episode(
    sessions: sessionmaker[Session],
    env: SimEnv,
    query: Query,
    round_id: int,
    policy_id: int,
    number: int,
    report: SmokeReport,
) -> None:
    uid = hashlib.sha256(f"{number}:{query.uid}:0".encode()).hexdigest()
    policy = ScriptedPolicy(env, query, seed=uid)
    codec = policy.codec
    obs = env.reset(query)
    steps: list[dict[str, Any]] = []
    status: str | None = None
    for index in range(len(query.path) * 3 + 8):
        raw = policy.next_output()
        action, error = None, None
        try:
            action = codec.parse(raw, env.device.size)
        except ParseError as exc:
            error = exc.reason
        after = env.step(action) if action is not None else obs
        steps.append(
            {
                "index": index,
                "screenshot": obs.screenshot,
                "screenshot_after": after.screenshot,
                "width": obs.width,
                "height": obs.height,
                "raw_output": raw,
                "parse_error": error,
                "action": action.model_dump(mode="json", exclude_none=True) if action else None,
            }
        )
        obs = after
        if action is not None and action.kind == ActionKind.TERMINATE:
            status = action.status
            break
    verdict = env.verify()
    success = verdict.success and status == "success"
    with transaction(sessions) as s:
        query_id = s.scalars(select(QueryRow.id).where(QueryRow.uid == query.uid)).one()
        episode = Episode(
            uid=uid,
            round_id=round_id,
            query_id=query_id,
            policy_id=policy_id,
            device="sim-0",
            status="done",
            outcome="success" if success else "failure",
            verifier_success=verdict.success,
            num_steps=len(steps),
            reason=None if success else (verdict.failed or "policy_gave_up"),
        )
        s.add(episode)
        s.flush()
        insert_ignore(s, Step, [{"episode_id": episode.id, **row} for row in steps], ["episode_id", "index"])
        ids = dict(s.execute(select(Step.index, Step.id).where(Step.episode_id == episode.id)).all())
        judgments, exclusions = [], []
        for row in steps:
            label = "NEUTRAL" if row["screenshot"] == row["screenshot_after"] else "GOOD"
            if row["parse_error"]:
                label = "HARMFUL"
                exclusions.append(
                    {
                        "round_id": round_id,
                        "stage": "rollout",
                        "item_type": "step",
                        "item_key": f"{uid}:{row['index']}",
                        "reason": row["parse_error"],
                        "detail": {"raw_output": row["raw_output"]},
                    }
                )
                report.reasons[row["parse_error"]] += 1
            report.labels[label] += 1
            judgments.append(
                {
                    "critic": CRITIC[0],
                    "critic_version": CRITIC[1],
                    "target": "step",
                    "target_id": ids[row["index"]],
                    "label": label,
                }
            )
        insert_ignore(s, Judgment, judgments, ["critic", "critic_version", "target", "target_id"])
        insert_ignore(s, Exclusion, exclusions, ["stage", "item_type", "item_key", "reason"])
        insert_ignore(
            s,
            Anchor,
            [
                {
                    "episode_id": episode.id,
                    "source": "verifier",
                    "annotator": "",
                    "label": "success" if verdict.success else "failure",
                    "confidence": 1.0,
                    "meta": verdict.to_json(),
                }
            ],
            ["episode_id", "source", "annotator"],
        )
    report.episodes[query.app] += 1
    report.successes[query.app] += success
    report.steps += len(steps)
