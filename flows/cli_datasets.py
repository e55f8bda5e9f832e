"""`trajforge datasets …`: publish, inspect, verify and export versioned datasets."""

from __future__ import annotations

from typing import Annotated, get_args

import typer

from flows.cli_common import ConfigOpt, RoundOpt, cli_round, cli_settings, cli_spine, hold_home
from flows.cli_stage import run_stage_here
from flows.progress_view import shown
from trajforge.actions import CODECS
from trajforge.settings import ExportFormat

datasets_app = typer.Typer(no_args_is_help=True, help="Versioned datasets: publish, inspect, verify, export.")
DatasetOpt = Annotated[str, typer.Option("--dataset", "-d", help="Dataset name.")]


def _round_numbers(text: str) -> tuple[int, ...]:
    """`1,2,5` as round numbers, or one clear error."""
    from trajforge.errors import ConfigError

    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ConfigError(f"--rounds {text!r}: give round numbers separated by commas, e.g. --rounds 1,2,5")
    return tuple(int(p) for p in parts)


@datasets_app.command("publish")
def datasets_publish(
    round_number: RoundOpt = None,
    dataset: Annotated[str | None, typer.Option("--dataset", "-d", help="Dataset name.")] = None,
    rounds: Annotated[str | None, typer.Option(help="Round numbers, e.g. 1,2,5; default: all.")] = None,
    val_fraction: Annotated[
        float | None, typer.Option(min=0, max=0.5, help="Share of queries held out (0.1).")
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Seal the dataset version of a round as the loop does: the publish stage (`trajforge stage
    publish`), rounds 1..N with the run's filters, the same report and config hash; a version sealed
    with that config is reused. --rounds, --dataset or --val-fraction seal another selection, with
    the same filters (shards re-used where unchanged)."""
    from evolve.spine import open_spine
    from publish.stages import PUBLISH, publish_config
    from publish.versions import publish

    settings = hold_home(cli_settings(config))
    if rounds is None and dataset is None and val_fraction is None:
        number = cli_round(settings, round_number)[2]
        run_stage_here(settings, PUBLISH, number, typer.echo)
        return
    spine = open_spine(settings)
    picked = _round_numbers(rounds) if rounds else None
    cfg = publish_config(settings, picked, 0.1 if val_fraction is None else val_fraction)
    with shown():
        report = publish(spine.sessions, spine.store, dataset or settings.evolve.dataset, cfg)
    typer.echo(report.render())


@datasets_app.command("list")
def datasets_list(config: ConfigOpt = None) -> None:
    """Every dataset version, its status and manifest hash."""
    from storage.datasets import list_versions

    _, sessions, _ = cli_spine(config)
    for v in list_versions(sessions):
        sealed = v.sealed_at.isoformat(timespec="seconds") if v.sealed_at else "-"
        typer.echo(f"{v.name} v{v.version}  {v.status:6}  {(v.manifest_sha256 or '-')[:16]}  sealed {sealed}")


@datasets_app.command("show")
def datasets_show(version: int, dataset: DatasetOpt = "trajforge", config: ConfigOpt = None) -> None:
    """A version's manifest in short: sizes, splits, composition, lineage, shards."""
    from storage.datasets import manifest

    _, sessions, store = cli_spine(config)
    man = manifest(sessions, store, dataset, version)
    lineage = man.lineage
    parent = f"v{man.parent.version}" if man.parent else "none"
    typer.echo(f"{dataset} v{version}: {man.rows} rows in {len(man.shards)} shards; parent {parent}")
    typer.echo("splits: " + ", ".join(f"{k}={v}" for k, v in man.splits.items()))
    typer.echo("categories: " + ", ".join(f"{k}={v}" for k, v in man.categories.items()))
    policies = ", ".join(f"r{p.round}:{p.policy}@{p.version}" for p in lineage.policies)
    typer.echo(f"lineage: rounds {lineage.rounds}; policies {policies}; critics {', '.join(lineage.critics)}")
    typer.echo(f"config hash: {man.config_hash[:16]}")


@datasets_app.command("card")
def datasets_card(version: int, dataset: DatasetOpt = "trajforge", config: ConfigOpt = None) -> None:
    """How a version's rows were made, as pinned when it was sealed: trajforge's version, each round's
    seed, policy, sampling and served models, the critics, each model family's prompt and coordinates."""
    from publish.card import card_lines
    from storage.datasets import manifest

    _, sessions, store = cli_spine(config)
    for line in card_lines(manifest(sessions, store, dataset, version)):
        typer.echo(line)


@datasets_app.command("diff")
def datasets_diff(old: int, new: int, dataset: DatasetOpt = "trajforge", config: ConfigOpt = None) -> None:
    """Samples added, removed (by reason) and changed between two versions, by category."""
    from storage.datasets import diff

    _, sessions, store = cli_spine(config)
    typer.echo(diff(sessions, store, dataset, old, new).render(old, new))


@datasets_app.command("verify")
def datasets_verify(version: int, dataset: DatasetOpt = "trajforge", config: ConfigOpt = None) -> None:
    """Re-hash every shard against the manifest; exit 1 on any mismatch."""
    from storage.datasets import manifest, verify

    _, sessions, store = cli_spine(config)
    problems = verify(sessions, store, dataset, version)
    for p in problems:
        typer.echo(f"mismatch: {p}")
    if problems:
        raise typer.Exit(1)
    typer.echo(f"{dataset} v{version}: {len(manifest(sessions, store, dataset, version).shards)} shards ok")


@datasets_app.command("export")
def datasets_export(
    version: int,
    fmt: Annotated[str, typer.Option("--format", help=f"One of {', '.join(get_args(ExportFormat))}.")],
    out: Annotated[str, typer.Option("--out", help="A directory, or s3://bucket/prefix.")],
    action_format: Annotated[str, typer.Option(help=f"One of {', '.join(CODECS)}.")] = "canonical",
    max_side: Annotated[int | None, typer.Option(help="Downscale screenshots to this many px.")] = None,
    weights: Annotated[
        str, typer.Option(help="repeat: SFT rows written round(weight) times; keep: once, weight as a field.")
    ] = "repeat",
    trainer: Annotated[
        str,
        typer.Option(
            help="Whose image size pixel coordinates are written for: llamafactory, swift, verl, none "
            "(auto: sft-sharegpt llamafactory, sft-messages swift, rl-verl verl, hf none)."
        ),
    ] = "auto",
    thoughts: Annotated[
        str,
        typer.Option(
            help="recorded: the prompt asks for a thought only where the row has one; always: every "
            "action row carries one (written from the step's own evidence where none was recorded)."
        ),
    ] = "recorded",
    family: Annotated[
        str | None,
        typer.Option(
            help="Write each action row as this model family's conversation (uitars15, qwen25vl, guiowl, "
            "agentcpm, mobiler1): its prompt, history and coordinate space, as `policy.family` rolls it out."
        ),
    ] = None,
    dataset: DatasetOpt = "trajforge",
    config: ConfigOpt = None,
) -> None:
    """Write a version for a trainer (streams: memory stays one shard)."""
    from publish.exports import export

    settings, sessions, store = cli_spine(config)
    with shown():
        report = export(
            sessions,
            store,
            dataset,
            version,
            fmt,
            out,
            action_format,
            max_side,
            settings.curate.point_tolerance,
            settings,
            weights,
            trainer,
            thoughts,
            family,
        )
    typer.echo(report.render())
