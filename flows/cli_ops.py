"""Operator commands: `trajforge check` (settings, database, store, model endpoint, fonts),
`trajforge status` (the running round, device health, leases and the deployment's last runs) and
`trajforge devices list|reset`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from flows.cli_common import ConfigOpt, cli_settings, hold_home
from flows.prefect_env import prefect_env
from trajforge.settings import Settings

devices_app = typer.Typer(no_args_is_help=True, help="The device pool: health, leases, resets.")
rounds_app = typer.Typer(no_args_is_help=True, help="The home's rounds: roll back what another command made.")
RUNS_SHOWN = 5


@devices_app.command("list")
def devices_list(config: ConfigOpt = None) -> None:
    """Every device: backend, health, failures in a row, since when it is down, live leases."""
    from evolve.spine import open_spine
    from rollout.loop import open_pool

    states = open_pool(open_spine(cli_settings(config))).devices()
    if not states:
        typer.echo("no devices registered (a rollout registers them)")
    for d in states:
        since = f"; down since {d.down_since:%Y-%m-%d %H:%M:%S} UTC" if d.down_since else ""
        leases = f"; leased by {', '.join(d.holders)}" if d.holders else ""
        typer.echo(
            f"{d.name}  {d.backend}  {d.health}  failures={d.failures}  "
            f"slots={len(d.holders)}/{d.capacity}{since}{leases}"
        )


@devices_app.command("reset")
def devices_reset(
    names: Annotated[list[str] | None, typer.Argument(help="Devices to reset (default: with --all).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Reset every device.")] = False,
    config: ConfigOpt = None,
) -> None:
    """Return devices to service: healthy, their run of failures cleared (after a repair or a drill)."""
    from evolve.spine import open_spine
    from rollout.loop import open_pool
    from trajforge.errors import ConfigError

    if not names and not all_:
        raise ConfigError("name the devices to reset, or pass --all; `trajforge devices list` shows them")
    reset = open_pool(open_spine(cli_settings(config))).reset(None if all_ else names)
    typer.echo(f"reset {len(reset)} devices: {', '.join(reset) or 'none registered'}")


@rounds_app.command("drop")
def rounds_drop(
    number: Annotated[int, typer.Argument(help="The first round to drop; every later one goes too.")],
    yes: Annotated[bool, typer.Option("--yes", help="Delete them: there is no undo.")] = False,
    config: ConfigOpt = None,
) -> None:
    """Roll round NUMBER and every later round back: their episodes, steps, judgments, labels,
    samples, guidance and model calls are deleted, so `evolve` can run on the home again after a
    `trajforge rollout` or `trajforge run` made a round of its own. A round a sealed dataset version
    holds is refused."""
    from evolve.spine import open_spine
    from storage.drop import drop_rounds
    from trajforge.errors import ConfigError

    if not yes:
        raise ConfigError(
            f"this deletes round {number}, every later round and all made from them; pass --yes to do it"
        )
    settings = hold_home(cli_settings(config))
    dropped, deleted = drop_rounds(open_spine(settings).sessions, number)
    rows = ", ".join(
        f"{deleted[t]} {t.replace('_', ' ')}s" for t in ("episode", "step", "judgment", "sample")
    )
    which = f"rounds {', '.join(map(str, dropped))}" if len(dropped) > 1 else f"round {dropped[0]}"
    typer.echo(f"dropped {which}: {rows}; evolve can take the home again")


def status_cmd(config: ConfigOpt = None) -> None:
    """The operator's view: the running round and who runs it, device pool health and leases, the
    last finished rounds, and the deployment's last runs when a Prefect API is set."""
    from evolve.status import loop_status

    settings = cli_settings(config)
    for line in loop_status(settings).lines():
        typer.echo(line)
    for line in deployment_runs():
        typer.echo(line)


def deployment_runs() -> list[str]:
    """The last runs of the `trajforge-evolve` deployment and its next scheduled one."""
    if not os.environ.get("PREFECT_API_URL"):
        return ["deployment runs: PREFECT_API_URL is not set (the served deployment's server shows them)"]
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    from flows.serve import DEPLOYMENT

    try:
        with get_client(sync_client=True) as client:
            runs = client.read_flow_runs(
                deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[DEPLOYMENT])),
                sort=FlowRunSort.EXPECTED_START_TIME_DESC,
                limit=50,
            )
    except Exception as exc:
        return [f"deployment runs: the Prefect API did not answer ({type(exc).__name__})"]
    past = [r for r in runs if r.state_type is not None and r.state_type.value != "SCHEDULED"]
    upcoming = [r for r in runs if r.state_type is not None and r.state_type.value == "SCHEDULED"]
    lines = [f"deployment {DEPLOYMENT}: {len(past)} runs so far" + (", none yet" if not past else "")]
    for run in past[:RUNS_SHOWN]:
        when = run.start_time or run.expected_start_time
        at = f" ({when:%Y-%m-%d %H:%M:%S} UTC)" if when else ""
        lines.append(f"  {run.name}: {run.state_name}{at}")
    if upcoming:
        nxt = min(r.expected_start_time for r in upcoming if r.expected_start_time is not None)
        lines.append(f"  next scheduled: {nxt:%Y-%m-%d %H:%M:%S} UTC")
    return lines


def serve_cmd(
    config: ConfigOpt = None,
    work_pool: Annotated[
        bool,
        typer.Option(
            "--work-pool", help="Register on the work pool (docker-compose's worker runs it) and exit."
        ),
    ] = False,
) -> None:
    """Deploy the `evolve` flow with the cron schedule `evolve.schedule`: served from this process,
    or registered on a work pool. Needs a Prefect API (PREFECT_API_URL)."""
    settings = cli_settings(config)
    prefect_env(settings)
    from flows.serve import create_limits, register_work_pool, serve_here

    limits = create_limits(settings)
    typer.echo("concurrency limits: " + ", ".join(f"{k}={v}" for k, v in limits.items()))
    schedule = settings.evolve.schedule or "none (run on demand)"
    if work_pool:
        deployment = register_work_pool(settings, config)
        pool = settings.evolve.work_pool
        typer.echo(f"deployment evolve/trajforge-evolve ({deployment}) on pool {pool}; schedule {schedule}")
        return
    typer.echo(f"serving evolve/trajforge-evolve; schedule {schedule}")
    serve_here(settings, config)


def check_cmd(config: ConfigOpt = None) -> None:
    """Validate the settings, reach the database (and check a SQLite file's integrity) and the object
    store, and look for the fonts the simulated screens need. Exit 1 on any problem."""
    from rollout.sim.render import cjk_font_path
    from trajforge.probe import probe_endpoints

    settings = cli_settings(config)
    if not _not_made_yet(settings):  # a new home is only read: `evolve` makes it
        _check_home(settings)
    if settings.llm.offline:
        typer.echo("llm: offline (no endpoint configured)")
    for answered in probe_endpoints(settings.llm):
        typer.echo(f"{answered}: ok")
    font = cjk_font_path()
    if font is None:
        typer.echo(
            "fonts: no CJK font, so screens with Chinese text cannot be rendered; reinstall trajforge's "
            "dependencies (pip install -e .), which bring one, or apt-get install fonts-wqy-microhei",
            err=True,
        )
        raise typer.Exit(1)
    typer.echo(f"fonts: CJK {font}: ok")
    _check_suites(settings.apps)


def _check_home(settings: Settings) -> None:
    """The database answers and is sound, and the object store holds what the database names."""
    from sqlalchemy import inspect

    from evolve.ownership import check_store
    from storage.db import check_connection, engine_from_settings, integrity_problems, session_factory
    from storage.objectstore import open_object_store
    from trajforge.errors import StorageError
    from trajforge.logs import redact_url

    engine = engine_from_settings(settings)
    check_connection(engine)
    problems = integrity_problems(engine)
    for problem in problems[:10]:
        typer.echo(f"database integrity: {problem}", err=True)
    if problems:
        raise StorageError(
            f"database {redact_url(settings.db_url)} is damaged ({len(problems)} problems above); "
            "restore it from a backup, or move the file aside to start afresh"
        )
    store = open_object_store(settings)
    if inspect(engine).has_table("step"):  # a home with rounds: the store still holds what they name
        check_store(session_factory(engine), store)
    typer.echo(f"database {redact_url(settings.db_url)}: ok")
    typer.echo(f"object store {settings.store_where}: ok")


def _not_made_yet(settings: Settings) -> bool:
    """A home whose SQLite file and local store do not exist yet: say so, and make neither."""
    from storage.db import create_db_engine
    from trajforge.logs import redact_url

    engine = create_db_engine(settings.db_url, make_folder=False)  # a malformed URL: its one line
    url = engine.url
    engine.dispose()
    local = settings.store.backend == "local"
    if url.get_backend_name() != "sqlite" or not url.database or Path(url.database).exists():
        return False
    if not local or settings.store_path.exists():
        return False
    typer.echo(f"database {redact_url(settings.db_url)}: not made yet (the first round makes it): ok")
    typer.echo(f"object store {settings.store_where}: not made yet: ok")
    return True


def _check_suites(apps: list[str]) -> None:
    """A run with desktop tasks needs a virtual display and the tasks' apps (named with the apt line);
    one with BrowserGym tasks needs BrowserGym's venv."""
    from rollout.suites import get_suite, is_suite_ref, split_ref
    from rollout.suites.desktop import DesktopSuite

    suites = {split_ref(a)[0] for a in apps if is_suite_ref(a)}
    desktops = [s for s in map(get_suite, sorted(suites)) if isinstance(s, DesktopSuite)]
    lacking = sorted({pkg for suite in desktops for pkg in suite.missing()})
    if lacking:
        typer.echo(f"desktops: missing {', '.join(lacking)}; apt-get install {' '.join(lacking)}", err=True)
        raise typer.Exit(1)
    if desktops:
        typer.echo(f"desktops: {', '.join(s.name for s in desktops)}: ok")
    if "browsergym" in suites:
        from rollout.suites import browsergym

        for problem in browsergym.missing():
            typer.echo(f"browsergym: missing {problem}", err=True)
            raise typer.Exit(1)
        typer.echo(f"browsergym: {browsergym.browsergym_python()}: ok")
