"""Revisits (GUI-Owl §6.4): the previous round's hard queries come back with their guidance.

A query at or below `curate.guidance_pass_rate` got guidance when its round was curated.
The next round adds, per app, up to `evolve.revisit_share` x `queries_per_app` of them
(lowest pass rate first) to its own new queries, and rolls them out with the guidance
(`rollout.loop.latest_guidance`): the VLM policy reads it in its prompt; the built-in knn
policy adds the guidance's reference trajectory to its memory as demonstrations. The choice
is stored in the round's stats once, so a rerun revisits the same queries. A query still hard
after its revisit gets fresh guidance and may come back again.

Success curves count a round's new queries only (a fresh sample of the apps' tasks);
revisits are reported on their own, with each query's pass rate before and after guidance.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import select

from storage.context import RoundContext
from storage.db import transaction
from storage.models import App, Episode, Guidance, Round
from storage.models import Query as QueryRow
from trajforge.settings import Settings

REVISITS = "revisits"  # key of the round's stats: the revisited query uids, in order


def revisited(rnd: Round) -> list[str]:
    """The round's revisited query uids (none before they are chosen)."""
    return list((rnd.stats or {}).get(REVISITS, []))


def revisit_rates(ctx: RoundContext, rnd: Round) -> list[dict[str, Any]]:
    """Per revisited query: its app, its pass rate when it got guidance, and this round's."""
    uids = revisited(rnd)
    if not uids:
        return []
    with ctx.sessions() as s:
        before: dict[str, float] = {}
        for uid, provenance in s.execute(
            select(Guidance.query_uid, Guidance.provenance)
            .join(Round, Round.id == Guidance.round_id)
            .where(Guidance.query_uid.in_(uids), Round.number < rnd.number)
            .order_by(Round.number)
        ):
            before[uid] = float((provenance or {}).get("pass_rate", 0.0))
        after: dict[str, list[int]] = {}
        apps: dict[str, str] = {}
        for uid, app, outcome in s.execute(
            select(QueryRow.uid, App.name, Episode.outcome)
            .join(QueryRow, QueryRow.id == Episode.query_id)
            .join(App, App.id == QueryRow.app_id)
            .where(Episode.round_id == rnd.id, Episode.policy_id == rnd.policy_id, QueryRow.uid.in_(uids))
        ):
            tally = after.setdefault(uid, [0, 0])
            tally[0] += outcome == "success"
            tally[1] += 1
            apps[uid] = app
    out = []
    for uid in uids:
        if uid in after:
            won, n = after[uid]
            out.append(
                {"query": uid, "app": apps[uid], "before": before.get(uid, 0.0), "after": round(won / n, 4)}
            )
    return out


def revisit_queries(ctx: RoundContext, settings: Settings, rnd: Round) -> list[str]:
    """The round's revisits: chosen on the first call and kept in the round's stats."""
    if REVISITS in (rnd.stats or {}):
        return revisited(rnd)
    picked: list[str] = []
    share = settings.evolve.revisit_share
    if rnd.number > 1 and share > 0:
        cap = math.ceil(share * settings.evolve.queries_per_app)
        per_app: dict[str, list[tuple[float, str]]] = {}
        with ctx.sessions() as s:
            for uid, provenance, app in s.execute(
                select(Guidance.query_uid, Guidance.provenance, App.name)
                .join(Round, Round.id == Guidance.round_id)
                .join(QueryRow, QueryRow.uid == Guidance.query_uid)
                .join(App, App.id == QueryRow.app_id)
                .where(Round.number == rnd.number - 1)
            ):
                per_app.setdefault(app, []).append((float((provenance or {}).get("pass_rate", 0.0)), uid))
        apps = {a.name for a in ctx.apps}
        for app in sorted(per_app):
            if app in apps:  # an app dropped from the config is not revisited
                picked += [uid for _, uid in sorted(per_app[app])[:cap]]
    with transaction(ctx.sessions) as s:
        row = s.get(Round, rnd.id)
        assert row is not None
        row.keep({REVISITS: picked})
    return picked
