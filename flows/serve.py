"""Deployments of the `evolve` flow, with the cron schedule from the config.

- One machine: `prefect.serve` runs the deployment in this process (needs a Prefect API:
  PREFECT_API_URL, or `prefect server start`).
- docker-compose: the deployment is registered on a work pool (`evolve.work_pool`), and
  the compose file's `prefect-worker` runs it against Postgres, MinIO and Label Studio.

Either way the tag concurrency limits are created first, so model-calling and
device-leasing tasks are capped by Prefect, not by a home-made scheduler.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from flows.rounds import DEVICES, MODEL_CALLS, evolve_flow
from trajforge.settings import Settings

DEPLOYMENT = "trajforge-evolve"
SOURCE = Path(__file__).resolve().parent.parent  # the checkout (or /app in the compose image)


def parameters(config: Path | None) -> dict[str, Any]:
    """A scheduled run adds one round to the loop."""
    return {"config": str(config.resolve()) if config else None, "more": 1}


def create_limits(settings: Settings) -> dict[str, int]:
    """Tag concurrency limits: model-calling tasks and device-leasing tasks (idempotent)."""
    from prefect.client.orchestration import get_client

    limits = {MODEL_CALLS: settings.evolve.model_calls, DEVICES: settings.evolve.shards}
    with get_client(sync_client=True) as client:
        for tag, n in limits.items():
            client.create_concurrency_limit(tag=tag, concurrency_limit=n)
    return limits


def register_work_pool(settings: Settings, config: Path | None) -> str:
    """The deployment on `evolve.work_pool` (created as a process pool if missing); its id."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    with get_client(sync_client=True) as client, contextlib.suppress(ObjectAlreadyExists):
        client.create_work_pool(WorkPoolCreate(name=settings.evolve.work_pool, type="process"))
    deployment = _deployment(settings, config, work_pool_name=settings.evolve.work_pool)
    # `apply`, not `Flow.deploy`: the latter's worker lookup sends a request Prefect 3.8.8's own
    # server rejects (limit=None on /workers/filter).
    deployment_id = deployment.apply()
    return str(deployment_id)


def _deployment(settings: Settings, config: Path | None, **pool: Any) -> Any:
    """The `evolve` flow loaded from this checkout's source, as a deployment with the schedule."""
    remote = evolve_flow.from_source(source=str(SOURCE), entrypoint="flows/rounds.py:evolve_flow")
    return remote.to_deployment(  # type: ignore[union-attr]
        name=DEPLOYMENT, cron=settings.evolve.schedule, parameters=parameters(config), **pool
    )


def serve_here(settings: Settings, config: Path | None) -> None:
    """Serve the deployment from this process until interrupted."""
    from prefect import serve

    serve(_deployment(settings, config), print_starting_message=True)
