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

from flows.rounds import DEVICES, MODEL_CALLS, evolve
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


def register_work_pool(settings: Settings, config: Path | None, source: Path = SOURCE) -> str:
    """The deployment on `evolve.work_pool` (created as a process pool if missing); its id."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    with get_client(sync_client=True) as client, contextlib.suppress(ObjectAlreadyExists):
        client.create_work_pool(WorkPoolCreate(name=settings.evolve.work_pool, type="process"))
    remote = evolve.from_source(source=str(source), entrypoint="flows/rounds.py:evolve")
    deployment_id = remote.deploy(  # type: ignore[union-attr]
        name=DEPLOYMENT,
        work_pool_name=settings.evolve.work_pool,
        cron=settings.evolve.schedule,
        parameters=parameters(config),
        print_next_steps=False,
        build=False,
        push=False,
    )
    return str(deployment_id)


def serve_here(settings: Settings, config: Path | None) -> None:
    """Serve the deployment from this process until interrupted."""
    from prefect import serve

    deployment = evolve.to_deployment(
        name=DEPLOYMENT, cron=settings.evolve.schedule, parameters=parameters(config)
    )
    serve(deployment, print_starting_message=True)  # type: ignore[arg-type]
