"""`trajforge annotate …`: human calibration in Label Studio."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli_common import ConfigOpt, RoundOpt, cli_round, cli_settings, cli_spine, hold_home

annotate_app = typer.Typer(
    no_args_is_help=True,
    help="Human calibration in Label Studio: push uncertain trajectories, pull verdicts.",
)


@annotate_app.command("push")
def annotate_push(
    round_number: RoundOpt = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=0, help="Push at most this many tasks, the most urgent first."),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Push the round's review queue (critic disagreements, low confidence) and a blind audit sample.

    Idempotent: a trajectory already pushed is never pushed again; identical trajectories
    share one task.
    """
    from annotation.push import push_round
    from evolve.spine import open_spine

    settings = cli_settings(config)
    hold_home(settings)
    sessions, round_id, number = cli_round(settings, round_number)
    report = push_round(sessions, round_id, open_spine(settings).store, settings.annotate, settings.s3, limit)
    typer.echo(f"round {number}: {report.render()}")
    typer.echo(f"annotate at {settings.annotate.url.rstrip('/')}/projects/")


@annotate_app.command("pull")
def annotate_pull(config: ConfigOpt = None) -> None:
    """Fetch new, updated and deleted annotations; store human anchors and corrections."""
    from annotation.pull import pull
    from evolve.spine import open_spine

    settings = hold_home(cli_settings(config))
    sessions = open_spine(settings).sessions
    typer.echo(pull(sessions, settings.annotate).render())


@annotate_app.command("stats")
def annotate_stats(config: ConfigOpt = None) -> None:
    """Critic vs human, human vs verifier and inter-annotator agreement; annotator throughput."""
    from annotation.stats import annotation_stats, render_stats

    _, sessions, _ = cli_spine(config)
    typer.echo(render_stats(annotation_stats(sessions)))


@annotate_app.command("config")
def annotate_config() -> None:
    """Print the Label Studio labelling config trajforge uses."""
    from annotation.config import LABEL_CONFIG

    typer.echo(LABEL_CONFIG)
