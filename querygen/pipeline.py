"""The query generation stage: sample → synthesise → refine → validate → dedup → store.

`generate_queries` is plain Python (no database); `store_generation` writes its result;
`load_history` reads what earlier rounds generated, for coverage weighting and dedup.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from querygen.complexity import TIERS, complexity, quotas
from querygen.dedup import QueryDeduper
from querygen.sampling import (
    UNSAMPLED_HINTS,
    Coverage,
    SampledPath,
    difficulty,
    finishing_screens,
    sample_path,
)
from querygen.synthesis import Draft, llm_draft, template_draft
from querygen.validation import InterfaceValidator
from storage.apps import register_app
from storage.db import insert_ignore, transaction
from storage.models import App, Exclusion, Round
from storage.models import Query as QueryRow
from storage.rounds import QUERY_STAGE
from trajforge.appspec import AppSpec
from trajforge.domain import Query
from trajforge.gateway import LLMGateway
from trajforge.world.model import Move
from trajforge.world.verify import Goal

STAGE = QUERY_STAGE
MAX_TRIES_PER_QUERY = 20  # sampling attempts per requested query before giving up
# An app's task space is finite: after this many candidates in a row without a new query,
# sampling has found (nearly) every task the app offers, and generation stops.
EXHAUSTED_AFTER = 2000
TIER_FULL = "tier_quota_full"  # a valid query whose tier already had its share of the round


@dataclass
class Dropped:
    uid: str
    reason: str
    detail: dict[str, Any]


@dataclass
class GenerationReport:
    app: str
    requested: int
    kept: list[Query] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    unsampled: Counter[str] = field(default_factory=Counter)  # random walks that gave no path, by why
    repeated_drops: int = 0  # samples that met a candidate already dropped, for the same reason
    _dropped_keys: set[tuple[str, str]] = field(default_factory=set, repr=False)
    exhausted: bool = False
    already_known: int = 0  # kept by earlier runs (from load_history)
    coverage: Coverage = field(default_factory=Coverage)
    mix: dict[str, int] | None = None  # wanted queries per tier (`evolve.tier_mix`); None: as sampled
    room: dict[str, int] | None = None  # what each tier can still take
    spares: list[tuple[Query, Draft]] = field(default_factory=list)  # valid, but their tier was full
    spilled: int = 0  # queries taken from a full tier because another tier ran dry

    def tiers(self) -> Counter[str]:
        return Counter(q.tier for q in self.kept)

    def reasons(self) -> Counter[str]:
        return Counter(d.reason for d in self.dropped)

    def drop(self, uid: str, reason: str, detail: dict[str, Any]) -> None:
        """Keep a dropped candidate once per reason, as `exclusion` keeps it; a resample is counted."""
        if (uid, reason) in self._dropped_keys:
            self.repeated_drops += 1
            return
        self._dropped_keys.add((uid, reason))
        self.dropped.append(Dropped(uid, reason, detail))

    def render(self, spec: AppSpec) -> str:
        kept = len(self.kept)
        by_difficulty = Counter(q.difficulty for q in self.kept)
        sources = Counter(q.source for q in self.kept)
        edges = {f"{s}.{w}" for s, w, _ in spec.edges()}
        covered = {e for e in self.coverage.edges if e in edges}
        lines = [
            f"{spec.name}: {kept} queries kept of {self.requested} requested, {len(self.dropped)} dropped",
            "dropped: " + (", ".join(f"{r}={n}" for r, n in sorted(self.reasons().items())) or "none"),
            "difficulty: " + ", ".join(f"{d}={by_difficulty[d]}" for d in ("easy", "medium", "hard")),
            "source: " + ", ".join(f"{s}={n}" for s, n in sorted(sources.items())),
            f"coverage: {len(set(self.coverage.screens) & set(spec.screens))}/{len(spec.screens)} screens, "
            f"{len(covered)}/{len(edges)} navigation edges",
            "tiers: "
            + ", ".join(f"{t}={self.tiers()[t]}" for t in TIERS)
            + (
                " (wanted "
                + ", ".join(f"{t}={self.mix[t]}" for t in TIERS)
                + f"; {self.spilled} from other tiers)"
                if self.mix is not None
                else ""
            ),
        ]
        if self.unsampled:
            lines.append(
                "no path: "
                + ", ".join(f"{r}={n}" for r, n in sorted(self.unsampled.items()))
                + " random walks"
            )
            if not kept:  # nothing came of the app at all: say what to change
                lines += [f"  {r}: {UNSAMPLED_HINTS[r]}" for r in sorted(self.unsampled)]
        if self.repeated_drops:
            lines.append(f"resampled: {self.repeated_drops} samples met a candidate already dropped")
        if self.exhausted:
            lines.append(
                f"stopped early: no new task in the last {EXHAUSTED_AFTER} candidates "
                f"(the app offers about {kept + self.already_known} distinct queries)"
            )
        return "\n".join(lines)


def query_uid(app: str, instruction: str, moves: tuple[Move, ...]) -> str:
    payload = json.dumps([app, instruction, [m.to_json() for m in moves]], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def generate_queries(spec: AppSpec, n: int, seed: int, **kwargs: Any) -> GenerationReport:
    """`agenerate_queries` for synchronous callers (not from inside a running event loop)."""
    return asyncio.run(agenerate_queries(spec, n, seed, **kwargs))


async def agenerate_queries(
    spec: AppSpec,
    n: int,
    seed: int,
    *,
    gateway: LLMGateway | None = None,
    coverage: Coverage | None = None,
    deduper: QueryDeduper | None = None,
    batch: int = 32,
    mix: dict[str, float] | None = None,
    progress: Callable[[int], None] | None = None,
) -> GenerationReport:
    """Generate up to `n` validated, deduplicated queries for one app.

    Args:
        gateway: synthesise and refine with an LLM; None uses the offline templates.
        coverage: what earlier rounds covered (sampling prefers the rest); updated in place.
        deduper: queries kept earlier, so this run does not repeat them.
        mix: shares of the complexity tiers (`querygen.complexity`) among the `n` queries; a
            tier the app cannot fill within the sampling budget is filled with other tiers'.
        progress: called after each batch with the number of queries it kept.
    """
    rng = random.Random(seed)
    report = GenerationReport(spec.name, n, coverage=coverage or Coverage())
    if mix:
        report.mix = quotas(n, mix)
        report.room = dict(report.mix)
    dedup = deduper or QueryDeduper()
    validator = InterfaceValidator(spec)
    initial = spec.initial_values()
    finishing = finishing_screens(spec)
    report.already_known = dedup.size
    tries = stale = 0
    while len(report.kept) < n and tries < n * MAX_TRIES_PER_QUERY:
        paths: list[SampledPath] = []
        while len(paths) < min(batch, n - len(report.kept)) and tries < n * MAX_TRIES_PER_QUERY:
            tries += 1
            path = sample_path(spec, rng, report.coverage, initial, finishing)
            if isinstance(path, str):
                report.unsampled[path] += 1
                continue
            report.coverage.add(path)
            paths.append(path)
        drafts = await _drafts(spec, paths, rng, gateway)
        kept_before = len(report.kept)
        for draft in drafts:
            before = len(report.kept) + len(report.spares)  # a spare is a new task too
            _admit(spec, draft, validator, dedup, report)
            stale = 0 if len(report.kept) + len(report.spares) > before else stale + 1
        if progress is not None:
            progress(len(report.kept) - kept_before)
        if stale >= EXHAUSTED_AFTER:
            report.exhausted = True
            break
    _fill_from_spares(dedup, report, n)
    return report


async def _drafts(
    spec: AppSpec, paths: list[SampledPath], rng: random.Random, gateway: LLMGateway | None
) -> list[Draft]:
    if gateway is None:
        return [template_draft(spec, p, rng) for p in paths]
    return list(await asyncio.gather(*(llm_draft(spec, p, gateway) for p in paths)))


def _admit(
    spec: AppSpec, draft: Draft, validator: InterfaceValidator, dedup: QueryDeduper, report: GenerationReport
) -> None:
    uid = query_uid(spec.name, draft.instruction or draft.constrained, draft.path.moves)
    detail: dict[str, Any] = {
        "instruction": draft.instruction,
        "moves": [m.to_json() for m in draft.path.moves],
        "source": draft.source,
        **({"raw": draft.raw} if draft.raw else {}),
    }
    if draft.reason is not None:
        report.drop(uid, draft.reason, {**detail, "why": draft.detail})
        return
    duplicate = dedup.find(draft.instruction, draft.goal)  # cheap, so before the replay
    if duplicate is not None:
        report.drop(
            uid,
            duplicate.reason,
            {**detail, "duplicate_of": duplicate.of, "similarity": duplicate.similarity},
        )
        return
    check = validator.check(draft)
    if not check.ok:
        assert check.reason is not None
        report.drop(uid, check.reason, {**detail, "why": check.detail})
        return
    path = [m.to_json() for m in draft.path.moves]
    query = Query(
        uid=uid,
        app=spec.name,
        instruction=draft.instruction,
        slots=dict(draft.goal.state),
        path=path,
        goal=draft.goal.model_dump(),
        source=draft.source,
        difficulty=difficulty(len(check.actions), draft.goal.constraints()),
        tier=complexity(spec, draft.instruction, path),
    )
    if report.room is not None:
        if report.room[query.tier] <= 0:
            report.spares.append((query, draft))  # taken only if other tiers cannot fill the round
            return
        report.room[query.tier] -= 1
    dedup.add(uid, draft.instruction, draft.goal)
    report.kept.append(query)


def _fill_from_spares(dedup: QueryDeduper, report: GenerationReport, n: int) -> None:
    """Tiers the app could not fill are filled with other tiers' queries; the rest are dropped."""
    for query, draft in report.spares:
        detail: dict[str, Any] = {"instruction": query.instruction, "tier": query.tier}
        duplicate = dedup.find(draft.instruction, draft.goal)  # spares can repeat each other
        if duplicate is not None:
            detail |= {"duplicate_of": duplicate.of, "similarity": duplicate.similarity}
            report.drop(query.uid, duplicate.reason, detail)
        elif len(report.kept) < n:
            dedup.add(query.uid, draft.instruction, draft.goal)
            report.kept.append(query)
            report.spilled += 1
        else:
            report.drop(query.uid, TIER_FULL, detail)
    report.spares = []


def generate_round(
    sessions: sessionmaker[Session], spec: AppSpec, n: int, rnd: Round, mix: dict[str, float] | None = None
) -> GenerationReport:
    """One round's new queries of an app, sampled beside what earlier rounds kept, and stored."""
    coverage, dedup = load_history(sessions, spec.name)
    generated = generate_queries(spec, n, seed=rnd.seed, coverage=coverage, deduper=dedup, mix=mix)
    store_generation(sessions, spec, generated, round_id=rnd.id)
    return generated


def load_history(sessions: sessionmaker[Session], app: str) -> tuple[Coverage, QueryDeduper]:
    """Coverage and dedup memory from the queries earlier runs kept for this app."""
    coverage, dedup = Coverage(), QueryDeduper()
    stmt = (
        select(QueryRow)
        .join(App, App.id == QueryRow.app_id)
        .where(App.name == app, QueryRow.status == "kept")
    )
    with sessions() as session:
        for row in session.scalars(stmt.order_by(QueryRow.id)):
            moves = tuple(Move.from_json(m) for m in row.path)
            coverage.add(SampledPath(app, moves, dict(row.slots), str(row.goal.get("screen", ""))))
            dedup.check(row.uid, row.instruction, Goal.model_validate(row.goal))
    return coverage, dedup


def store_generation(
    sessions: sessionmaker[Session],
    spec: AppSpec,
    report: GenerationReport,
    round_id: int | None = None,
    meta: dict[str, Any] | None = None,
) -> None:
    """Kept queries into `query` (with `meta` added to each one's), drops into `exclusion`, in one
    transaction; reruns add nothing twice."""
    with transaction(sessions) as session:
        app_id = register_app(session, spec)
        insert_ignore(
            session,
            QueryRow,
            [
                {
                    "uid": q.uid,
                    "app_id": app_id,
                    "round_id": round_id,
                    "instruction": q.instruction,
                    "template": None,
                    "slots": q.slots,
                    "path": q.path,
                    "goal": q.goal,
                    "source": q.source,
                    "status": "kept",
                    "difficulty": q.difficulty,
                    "meta": {"tier": q.tier, **(meta or {})},
                }
                for q in report.kept
            ],
            ["uid"],
        )
        insert_ignore(
            session,
            Exclusion,
            [
                {
                    "round_id": round_id,
                    "stage": STAGE,
                    "item_type": "query",
                    "item_key": d.uid,
                    "reason": d.reason,
                    "detail": d.detail,
                }
                for d in report.dropped
            ],
            ["stage", "item_type", "item_key", "reason"],
        )
