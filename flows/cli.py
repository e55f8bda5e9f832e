"""The `trajforge` command line. A TrajforgeError becomes one line and exit code 1."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from trajforge.actions import CODECS, DEFAULT_SCREEN, Screen, get_codec
from trajforge.errors import ActionError, TrajforgeError
from trajforge.logs import configure_logging, redact_url
from trajforge.settings import Settings, load_settings

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    help="trajforge: a self-evolving data engine for GUI agents.",
)
actions_app = typer.Typer(no_args_is_help=True, help="Parse and convert model action outputs.")
db_app = typer.Typer(no_args_is_help=True, help="Database schema.")
app.add_typer(actions_app, name="actions")
app.add_typer(db_app, name="db")

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML run config (sections db, store, s3, llm)."),
]
_FORMATS = ", ".join(CODECS)


def _settings(config: Path | None) -> Settings:
    return load_settings(config)


@actions_app.command("convert")
def actions_convert(
    from_fmt: Annotated[str, typer.Option("--from", help=f"Input format: {_FORMATS}.")],
    to_fmt: Annotated[str, typer.Option("--to", help=f"Output format: {_FORMATS}.")],
    screen: Annotated[str, typer.Option(help="Screen WxH in pixels, for pixel formats.")] = (
        f"{DEFAULT_SCREEN.width}x{DEFAULT_SCREEN.height}"
    ),
) -> None:
    """Convert one model output per stdin line; a bad line prints `error: <reason>` in its place."""
    source, target, size = get_codec(from_fmt), get_codec(to_fmt), Screen.parse(screen)
    failed = 0
    for line in sys.stdin:
        text = line.rstrip("\r\n")
        try:
            out = target.format(source.parse(text, size), size)
        except ActionError as exc:
            failed += 1
            out = f"error: {exc}"
        sys.stdout.write(out.replace("\n", " ") + "\n")
    sys.stdout.flush()
    if failed:
        raise typer.Exit(1)


@db_app.command("upgrade")
def db_upgrade(config: ConfigOpt = None) -> None:
    """Create the schema, or migrate it to the newest revision."""
    from storage.db import current_revision, engine_from_settings, upgrade

    settings = _settings(config)
    engine = engine_from_settings(settings)
    upgrade(engine)
    typer.echo(f"database {redact_url(settings.db_url)} at revision {current_revision(engine)}")


@app.command("check")
def check(config: ConfigOpt = None) -> None:
    """Validate the settings and reach the database and the object store."""
    from storage.db import check_connection, engine_from_settings
    from storage.objectstore import open_object_store

    settings = _settings(config)
    check_connection(engine_from_settings(settings))
    open_object_store(settings)
    typer.echo(f"database {redact_url(settings.db_url)}: ok")
    store = settings.s3.endpoint if settings.store.backend == "s3" else str(settings.store_path)
    typer.echo(f"object store {settings.store.backend} {store}: ok")
    typer.echo(f"llm: {settings.llm.base_url or 'offline (no endpoint configured)'}")


@app.command("config")
def show_config(config: ConfigOpt = None) -> None:
    """Print the effective settings, secrets masked."""
    settings = _settings(config)
    dump = settings.model_dump(mode="json")
    dump["db"]["url"] = redact_url(settings.db_url)
    for name, section in dump.items():
        if isinstance(section, dict):
            for key, value in section.items():
                typer.echo(f"{name}.{key} = {value}")
        else:
            typer.echo(f"{name} = {section}")


@app.command("run")
def run(
    config: ConfigOpt = None,
    episodes: Annotated[int, typer.Option(min=1, max=1000, help="Episodes in the smoke round.")] = 4,
) -> None:
    """Run the main job on the configured spine (embedded default: SQLite + local store, offline).

    Until the round flow lands, this is the smoke round: a scripted policy on a
    rendered demo task, through codecs, content-addressed screenshots, bulk writes,
    heuristic judgments and verifier anchors.
    """
    from rollout.smoke import run_smoke_round

    configure_logging()
    report = run_smoke_round(_settings(config), episodes=episodes)
    typer.echo(report.render())


def main() -> None:
    """Console-script entry point."""
    try:
        app()  # standalone: usage errors print themselves and exit 2
    except TrajforgeError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
