"""A round's queries of the suite tasks in `apps:` (`SUITE:TASK`): seeds, worded by the environment."""

from __future__ import annotations

from sqlalchemy import select

from evolve.spine import Spine
from rollout.suites.queries import environment_queries, round_seeds
from storage.models import App, Round
from storage.models import Query as QueryRow


def suite_round_queries(spine: Spine, rnd: Round) -> list[str]:
    """The round's queries of each suite task: stored ones, else `queries_per_app` seeds of the
    round, each worded by the environment itself."""
    stored: dict[str, list[str]] = {}
    with spine.sessions() as s:
        for uid, app in s.execute(
            select(QueryRow.uid, App.name)
            .join(App, App.id == QueryRow.app_id)
            .where(QueryRow.round_id == rnd.id, App.name.in_(list(spine.suites)), QueryRow.status == "kept")
            .order_by(QueryRow.uid)
        ):
            stored.setdefault(app, []).append(uid)
    n = spine.settings.evolve.queries_per_app
    missing = {app: round_seeds(rnd.seed, n) for app in spine.suites if app not in stored}
    made = environment_queries(spine.sessions, spine.suites, missing, round_id=rnd.id)
    return [u for app in spine.suites for u in stored.get(app) or sorted(q.uid for q in made[app])]
