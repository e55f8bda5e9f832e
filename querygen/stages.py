"""The query generator's stage of a round: `queries`, the round's task queries (new ones sampled
per app on its navigation graph, the suite tasks' queries worded by their environments, then the
revisits of the previous round's hard queries, `querygen.revisits`). Idempotent: a rerun finds the
stored queries and samples only what is missing.
"""

from __future__ import annotations

from typing import Protocol

from sqlalchemy import select

from querygen.pipeline import generate_round
from querygen.revisits import revisit_queries
from storage.context import RoundContext
from storage.models import App, Round
from storage.models import Query as QueryRow
from trajforge.stage import Facts, Given, Stage


class QueryContext(RoundContext, Protocol):
    """The round's context as the query stage needs it: with its suite tasks' queries."""

    def suite_queries(self, rnd: Round) -> list[str]:
        """The round's queries of the suite tasks in `apps:`, worded by each environment (stored
        on the first call, read back after)."""
        ...


def round_queries(ctx: QueryContext, number: int, _given: Given) -> Facts:
    """The round's query uids: its new queries (stored ones, else sampled per app and stored, one
    transaction per app), then its revisits (`querygen.revisits`)."""
    settings = ctx.settings
    rnd = ctx.round(number)
    uids: list[str] = []
    for spec in ctx.apps:
        with ctx.sessions() as s:
            have = s.scalars(
                select(QueryRow.uid)
                .join(App, App.id == QueryRow.app_id)
                .where(QueryRow.round_id == rnd.id, App.name == spec.name, QueryRow.status == "kept")
                .order_by(QueryRow.uid)
            ).all()
        if not have:
            ev = settings.evolve
            generated = generate_round(ctx.sessions, spec, ev.queries_per_app, rnd, ev.mix_of(number))
            have = sorted(q.uid for q in generated.kept)
        uids.extend(have)
    uids.extend(ctx.suite_queries(rnd))
    uids += [u for u in revisit_queries(ctx, settings, rnd) if u not in uids]
    return Facts(uids, f"{len(uids)} queries")


QUERIES: Stage[QueryContext] = Stage(
    "queries", "round-queries", round_queries, reads=("app", "round"), writes=("query",)
)
