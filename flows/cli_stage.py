"""`trajforge stage NAME`: one stage of a started round alone, the code the loop runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flows.cli_common import ConfigOpt, RoundOpt, cli_round, cli_settings, hold_home
from flows.progress_view import shown
from trajforge.settings import Settings

if TYPE_CHECKING:
    from evolve.spine import Spine
    from trajforge.stage import Stage


def run_stage_here(
    settings: Settings, stage: Stage[Spine], number: int, show: Callable[[str], None], again: bool = True
) -> Any:
    """Run a stage of round `number` in this process by the one runner (`evolve.stages.run_stage`), on
    the reports its earlier stages kept, with the run's apps and every stored one
    (`evolve.spine.RoundApps`); its report is kept in the round. A command a person types runs the
    stage `again` (every stage is idempotent: what is stored is not redone)."""
    from evolve.spine import round_context
    from evolve.stages import in_order, run_stage
    from storage.rounds import recorded

    ctx = round_context(settings)
    with shown():
        return run_stage(
            ctx,
            stage,
            number,
            recorded(ctx.sessions, number),
            in_order(ctx, lambda report: show(report.render())),
            again=again,
        )


def stage_cmd(
    name: Annotated[
        str,
        typer.Argument(
            help="The stage: start, queries, devices, rollout, guided, explore, "
            "judge, calibrate, encoder, featurise, curate, publish, train, "
            "promote or finish."
        ),
    ],
    round_number: RoundOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Run one stage of a started round alone, as the loop runs it (idempotent).

    The stages it needs must have run on the round; it reads the reports they kept, and keeps its
    own, so `trajforge evolve` resuming the round does not run it again.
    """
    from evolve.stages import stage_named

    settings = cli_settings(config)
    hold_home(settings)
    stage = stage_named(name)
    number = cli_round(settings, round_number)[2]
    typer.echo(f"round {number}: {stage.name}")
    run_stage_here(settings, stage, number, typer.echo)
