"""The app registry in the database: each app name is bound to one spec, by its hash.

Queries, episodes and samples refer to an app by name, so a second, different spec under a
name already stored (a user spec called `takeout`, an edited spec) would silently mix with
the first; it is refused instead. Stages that judge or curate a round read the specs back
from here, so a round rolled out from a spec file needs no config to be judged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.db import insert_ignore
from storage.models import App, Episode, Query, Round
from trajforge.appspec import AppSpec, spec_sha256
from trajforge.errors import SpecError


def register_app(session: Session, spec: AppSpec) -> int:
    """The app's id, storing its spec the first time.

    Raises:
        SpecError: another spec is already stored under this name.
    """
    digest = spec_sha256(spec)
    spec_json = spec.model_dump(mode="json", by_alias=True)
    insert_ignore(session, App, [{"name": spec.name, "spec": spec_json, "spec_sha256": digest}], ["name"])
    app_id, stored = session.execute(select(App.id, App.spec_sha256).where(App.name == spec.name)).one()
    if stored != digest:
        raise _clash(spec, stored)
    return int(app_id)


def register_suite_app(session: Session, app: str, suite: str, device: str | None = None) -> int:
    """The id of a suite task's app (`SUITE:TASK`): no spec, the suite named in its place, with the
    kind of device it runs on where the suite says (`trajforge.actions.DEVICES`)."""
    spec_json = {
        "suite": suite,
        "task": app.removeprefix(f"{suite}:"),
        **({"device": device} if device else {}),
    }
    digest = hashlib.sha256(json.dumps(spec_json, sort_keys=True).encode()).hexdigest()
    insert_ignore(session, App, [{"name": app, "spec": spec_json, "spec_sha256": digest}], ["name"])
    return int(session.execute(select(App.id).where(App.name == app)).scalar_one())


def round_devices(sessions: sessionmaker[Session], rounds: Sequence[int]) -> dict[str, str | None]:
    """The kind of device (`trajforge.actions.DEVICES`) each app rolled out in these rounds runs on:
    an app spec's is a phone, a suite task's what its suite said (None where it said nothing)."""
    with sessions() as s:
        rolled = (
            select(Query.app_id)
            .join(Episode, Episode.query_id == Query.id)
            .join(Round, Round.id == Episode.round_id)
            .where(Round.number.in_(rounds))
        )
        rows = s.execute(select(App.name, App.spec).where(App.id.in_(rolled)))
        return {name: spec.get("device") if "suite" in spec else "phone" for name, spec in rows}


def check_apps(sessions: sessionmaker[Session], specs: Sequence[AppSpec]) -> None:
    """Refuse, writing nothing, specs whose names are stored with different specs."""
    with sessions() as s:
        stored = {name: sha for name, sha in s.execute(select(App.name, App.spec_sha256))}
    for spec in specs:
        if spec.name in stored and stored[spec.name] != spec_sha256(spec):
            raise _clash(spec, stored[spec.name])


def _clash(spec: AppSpec, stored: str) -> SpecError:
    return SpecError(
        f"app {spec.name!r}: this database already holds a different spec under that name "
        f"(sha256 {stored[:12]}, this one {spec_sha256(spec)[:12]}); their queries and episodes "
        "would mix: give the spec another `name:` (or use a fresh TRAJFORGE_HOME)"
    )


def stored_apps(sessions: sessionmaker[Session]) -> list[AppSpec]:
    """Every spec the database holds, by name."""
    with sessions() as s:
        rows = s.scalars(select(App).order_by(App.name)).all()
        return [AppSpec.model_validate(r.spec) for r in rows if "suite" not in r.spec]  # suites: no spec


def round_apps(sessions: sessionmaker[Session], configured: Sequence[AppSpec]) -> list[AppSpec]:
    """The specs a stage needs to judge or curate: the configured apps, then every other stored one
    (an app rolled out from a spec file earlier), each checked against what is stored."""
    check_apps(sessions, configured)
    names = {a.name for a in configured}
    return [*configured, *(a for a in stored_apps(sessions) if a.name not in names)]
