"""`trajforge critics …`: judge a round, calibrate the critics against the anchors, extract CSRS samples."""

from __future__ import annotations

import typer

from flows.cli_common import ConfigOpt, RoundOpt, cli_round, cli_settings, hold_home
from flows.cli_stage import run_stage_here

critics_app = typer.Typer(no_args_is_help=True, help="Offline critics and their calibration.")


@critics_app.command("run")
def critics_run(round_number: RoundOpt = None, config: ConfigOpt = None) -> None:
    """Judge every step and episode of a round (idempotent): the offline critics, and the model
    critics too when TRAJFORGE_LLM_BASE_URL is set (a rerun costs no model calls)."""
    from critics.stages import JUDGE

    settings = cli_settings(config)
    hold_home(settings)
    number = cli_round(settings, round_number)[2]

    def show(text: str) -> None:
        for line in text.splitlines():
            typer.echo(f"round {number}: {line}")

    run_stage_here(settings, JUDGE, number, show)


@critics_app.command("calibrate")
def critics_calibrate(round_number: RoundOpt = None, config: ConfigOpt = None) -> None:
    """The round's calibrate stage (`trajforge stage calibrate`): compare the critics' verdicts with the
    anchors, decide outcomes where the trust allows, and extract the CSRS samples; print the stage's
    report, then the calibration it stored, channel by channel."""
    from critics.calibration import render_calibration
    from critics.stages import CALIBRATE
    from storage.models import Round

    settings = cli_settings(config)
    hold_home(settings)
    sessions, round_id, number = cli_round(settings, round_number)
    typer.echo(f"round {number} calibration")
    run_stage_here(settings, CALIBRATE, number, typer.echo)
    with sessions() as s:
        stored = s.get(Round, round_id)
        typer.echo(render_calibration((stored.stats or {})["calibration"] if stored else {}))


@critics_app.command("extract")
def critics_extract(round_number: RoundOpt = None, config: ConfigOpt = None) -> None:
    """CSRS: the seven categories of training samples from every anchored episode (idempotent).

    With TRAJFORGE_LLM_BASE_URL set, the model writes the knowledge categories (1-5).
    """
    from critics.csrs import extract_round
    from critics.stages import judge_writes
    from evolve.spine import open_spine
    from storage.llm_cache import build_gateway
    from storage.objectstore import frame_reader

    settings = cli_settings(config)
    hold_home(settings)
    sessions, round_id, number = cli_round(settings, round_number, "calibrate")
    gateway = build_gateway(settings.llm, sessions, "writer")
    store = open_spine(settings).store
    typer.echo(f"round {number}")
    shared = judge_writes(settings.llm)
    report = extract_round(
        sessions, round_id, gateway, frame_reader(store), settings.critics, judge_writes=shared
    )
    typer.echo(report.render())
