"""`trajforge curate …`: curate a judged round, and measure trajectory dedup on labelled pairs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli_common import ConfigOpt, RoundOpt, cli_round, cli_settings, hold_home
from flows.cli_stage import run_stage_here
from flows.progress_view import shown
from trajforge.settings import FeaturizerName

curate_app = typer.Typer(
    invoke_without_command=True,
    help="Dedup, guidance, thoughts, error-recovery samples and balancing for a judged round; "
    "`curate train-encoder` trains the screen encoder dedup uses; `curate dedup-eval` measures dedup "
    "on your labelled pairs.",
)


@curate_app.callback()
def curate(ctx: typer.Context, round_number: RoundOpt = None, config: ConfigOpt = None) -> None:
    """Dedup, guidance, thoughts, error-recovery samples and balancing for a judged round (idempotent).

    With TRAJFORGE_LLM_BASE_URL set, guidance and thoughts are written by the model.
    """
    if ctx.invoked_subcommand is not None:
        return
    from curation.stages import CURATE

    settings = cli_settings(config)
    hold_home(settings)
    number = cli_round(settings, round_number)[2]
    typer.echo(f"round {number}")
    run_stage_here(settings, CURATE, number, typer.echo)


@curate_app.command("train-encoder")
def train_encoder(
    round_number: Annotated[
        int | None,
        typer.Option("--round", help="Train on the screenshots of rounds up to this one (default: all)."),
    ] = None,
    device: Annotated[
        str | None, typer.Option(help="torch device, e.g. cpu or cuda (default: cuda when available).")
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Train the screen encoder (a ResNet) on this store's screenshots and store it.

    Dedup (curate.featurizer resnet, the default) uses the latest trained encoder; the
    budget is curate.encoder_steps (steps, not seconds).
    """
    from curation.encoder import train_store_encoder
    from evolve.spine import open_spine

    settings = cli_settings(config)
    hold_home(settings)
    spine = open_spine(settings)
    round_id = cli_round(settings, round_number)[1] if round_number is not None else None
    with shown():
        stored, report = train_store_encoder(
            spine.sessions, spine.store, spine.frames, settings.curate, round_id, device
        )
    typer.echo(report.render())
    typer.echo(f"stored encoder {stored.sha256[:16]} at {stored.prefix}/; dedup uses it from now on")


@curate_app.command("dedup-eval")
def dedup_eval(
    pairs: Annotated[
        Path,
        typer.Option(
            "--pairs",
            help='JSON Lines: {"a": [screenshot paths], "b": [screenshot paths], "duplicate": true|false}.',
        ),
    ],
    featurizer: Annotated[
        FeaturizerName | None,
        typer.Option(help="Screenshot features to measure (default: curate.featurizer)."),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Precision and recall of trajectory dedup per threshold on labelled pairs, and the best one.

    Set the chosen threshold as curate.dedup_threshold.
    """
    from curation.dedup_eval import SHOWN, choose, digest, read_pairs, score, similarities
    from evolve.spine import open_spine
    from storage.features import dedup_threshold, make_featurizer

    full = cli_settings(config)
    settings = full.curate
    if featurizer is not None:
        settings = settings.model_copy(update={"featurizer": featurizer})
    labelled = read_pairs(pairs)
    spine = open_spine(full)
    embed = make_featurizer(settings, spine.sessions, spine.store)
    sims = similarities(embed.embed, labelled, settings.dedup_skip_overlays, settings.dedup_collapse)
    labels = [p.duplicate for p in labelled]
    typer.echo(
        f"{len(labelled)} pairs ({sum(labels)} duplicate, {len(labels) - sum(labels)} distinct; "
        f"set {digest(labelled)}), featurizer {embed.key}"
        + ("" if settings.dedup_skip_overlays else ", dialog-covered frames kept")
    )
    typer.echo("threshold  precision  recall  F1")
    for threshold in SHOWN:
        s = score(sims, labels, threshold)
        typer.echo(f"{threshold:<9.3f}  {s.precision:<9.2f}  {s.recall:<6.2f}  {s.f1:.2f}")
    now = score(sims, labels, dedup_threshold(settings, embed))
    best = choose(sims, labels)
    source = "the featuriser's own" if settings.dedup_threshold is None else "curate.dedup_threshold"
    typer.echo(
        f"threshold in use {now.threshold} ({source}): precision {now.precision:.2f} "
        f"recall {now.recall:.2f} F1 {now.f1:.2f}"
    )
    typer.echo(
        f"chosen: {best.threshold} (best F1 {best.f1:.2f}: precision {best.precision:.2f} "
        f"recall {best.recall:.2f}); set curate.dedup_threshold: {best.threshold}"
    )
