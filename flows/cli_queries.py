"""`trajforge queries …`: task queries sampled from an app's navigation graph."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from flows.cli_common import ConfigOpt, cli_settings, hold_home
from flows.progress_view import progress_bar

queries_app = typer.Typer(no_args_is_help=True, help="Task queries sampled from app graphs.")


@queries_app.command("generate")
def queries_generate(
    app_ref: Annotated[str, typer.Option("--app", help="Built-in app name or path to an app spec.")],
    n: Annotated[int, typer.Option("--n", min=1, max=1_000_000, help="Queries to keep.")] = 100,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    mix: Annotated[
        str | None,
        typer.Option(help="Tier mix, e.g. localization=0.5,functional=0.3,intent=0.2 (default: as sampled)."),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Sample, synthesise, validate and dedup queries for one app; store them and print a summary."""
    import asyncio

    from evolve.spine import open_spine
    from querygen.complexity import check_mix, parse_mix
    from querygen.pipeline import GenerationReport, agenerate_queries, load_history, store_generation
    from storage.apps import check_apps
    from storage.llm_cache import build_gateway
    from trajforge.appspec import load_app

    shares = check_mix(parse_mix(mix)) if mix else None
    settings = hold_home(cli_settings(config))
    spec = load_app(app_ref)
    sessions = open_spine(settings).sessions
    check_apps(sessions, [spec])  # a spec named like a stored, different one: refused before any call
    coverage, dedup = load_history(sessions, spec.name)

    async def generate(kept: Callable[[int], None]) -> GenerationReport:
        gateway = build_gateway(settings.llm, sessions, "writer")
        try:
            return await agenerate_queries(
                spec, n, seed, gateway=gateway, coverage=coverage, deduper=dedup, mix=shares, progress=kept
            )
        finally:
            if gateway is not None:
                await gateway.aclose()

    with progress_bar(f"{spec.name}: queries kept", n) as advance:
        report = asyncio.run(generate(advance))
    store_generation(sessions, spec, report)
    typer.echo(report.render(spec))
