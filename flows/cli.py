"""The `trajforge` command line. A TrajforgeError becomes one line and exit code 1."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from flows.cli_annotate import annotate_app
from flows.cli_common import ConfigOpt, cli_settings, cli_spine, hold_home
from flows.cli_critics import critics_app
from flows.cli_curate import curate_app
from flows.cli_datasets import datasets_app
from flows.cli_ops import check_cmd, devices_app, rounds_app, serve_cmd, status_cmd
from flows.cli_queries import queries_app
from flows.cli_stage import stage_cmd
from flows.prefect_env import prefect_call, prefect_env, records_to_file
from flows.progress_view import shown
from trajforge.actions import CODECS, DEFAULT_SCREEN, Screen, get_codec
from trajforge.actions.space import coordinate_screen
from trajforge.errors import ActionError, ConfigError, TrajforgeError
from trajforge.logs import RedactingStream, configure_logging, log_file, redact, redact_url
from trajforge.procs import one_blas_thread
from trajforge.settings import Settings
from trajforge.stopping import Stopped, call_stoppable, stop_on_signals

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    help="trajforge: a self-evolving data engine for GUI agents.",
)
actions_app = typer.Typer(no_args_is_help=True, help="Parse and convert model action outputs.")
db_app = typer.Typer(no_args_is_help=True, help="Database schema.")
apps_app = typer.Typer(no_args_is_help=True, help="App specs (navigation graphs).")
app.add_typer(actions_app, name="actions")
app.add_typer(db_app, name="db")
app.add_typer(apps_app, name="apps")
app.add_typer(queries_app, name="queries")
app.add_typer(datasets_app, name="datasets")
app.add_typer(critics_app, name="critics")
app.add_typer(curate_app, name="curate")
app.add_typer(annotate_app, name="annotate")
app.add_typer(devices_app, name="devices")
app.add_typer(rounds_app, name="rounds")


@app.callback()
def _every_command() -> None:
    """Runs before any command: logging with secrets redacted, whatever the command logs."""
    configure_logging(logging.WARNING)


_FORMATS = ", ".join(CODECS)
_MAX_LINE = 2**20  # `actions convert`: the longest model output a line may hold
_SCREEN_HELP = (
    "The screenshot's WxH in pixels: each format's coordinates live in its own space for it, as "
    "rollout and export use (Qwen2.5-VL based formats: the processor's smart resize)."
)


@actions_app.command("convert")
def actions_convert(
    from_fmt: Annotated[str, typer.Option("--from", help=f"Input format: {_FORMATS}.")],
    to_fmt: Annotated[str, typer.Option("--to", help=f"Output format: {_FORMATS}.")],
    screen: Annotated[
        str, typer.Option(help=_SCREEN_HELP)
    ] = f"{DEFAULT_SCREEN.width}x{DEFAULT_SCREEN.height}",
) -> None:
    """Convert one model output per stdin line; a bad line prints `error: <reason>` in its place.

    Output is one line per input line: formats written on several lines (qwen, mobiler1) have
    their newlines printed as spaces, which their parsers accept.
    """
    source, target, size = get_codec(from_fmt), get_codec(to_fmt), Screen.parse(screen)
    read_in, written_in = (coordinate_screen(fmt, size.width, size.height) for fmt in (from_fmt, to_fmt))
    failed = 0
    for number, line in enumerate(iter(lambda: sys.stdin.readline(_MAX_LINE + 1), ""), 1):
        if len(line) > _MAX_LINE:  # read no further: `< /dev/zero` has no line end
            raise ConfigError(
                f"stdin line {number}: over {_MAX_LINE} characters; give one model output per line"
            )
        text = line.rstrip("\r\n")
        try:
            out = target.format(source.parse(text, read_in), written_in)
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

    settings = cli_settings(config)
    engine = engine_from_settings(settings)
    upgrade(engine)
    typer.echo(f"database {redact_url(settings.db_url)} at revision {current_revision(engine)}")


@apps_app.command("validate")
def apps_validate(paths: Annotated[list[Path], typer.Argument(help="App spec YAML files.")]) -> None:
    """Check app specs; print every problem (file, element, fix) and exit 1 if any. Writes nothing."""
    from trajforge.appspec import load_spec
    from trajforge.errors import SpecError
    from trajforge.spec_lint import intent_warnings

    failed = False
    for path in paths:
        try:
            spec = load_spec(path)
        except SpecError as exc:
            failed = True
            for problem in exc.problems:
                typer.echo(f"error: {problem}", err=True)
            continue
        for warning in intent_warnings(spec):
            typer.echo(f"warning: app spec {path}: {warning}", err=True)
        typer.echo(f"{path}: ok ({spec.name}: {len(spec.screens)} screens, {len(spec.edges())} edges)")
    if failed:
        raise typer.Exit(1)


@apps_app.command("list")
def apps_list() -> None:
    """The built-in apps."""
    from trajforge.appspec import builtin_app_names, load_app

    for name in builtin_app_names():
        spec = load_app(name)
        typer.echo(
            f"{name:10} {spec.title:10} {spec.locale}  {len(spec.screens)} screens, "
            f"{len(spec.edges())} edges, {len(spec.slots)} slots"
        )


@app.command("rollout")
def rollout(
    app_ref: Annotated[
        str, typer.Option("--app", help="Built-in app, app spec path, or suite task (desktop:TASK).")
    ],
    queries: Annotated[
        int, typer.Option("--queries", min=1, help="Queries to roll out (generated if missing).")
    ] = 10,
    rollouts_per_query: Annotated[int, typer.Option("--rollouts-per-query", min=1, max=64)] = 1,
    policy: Annotated[
        str | None,
        typer.Option(
            help="noisy-oracle (the default; suite tasks: random-explorer), random-explorer or vlm."
        ),
    ] = None,
    family: Annotated[
        str | None,
        typer.Option(
            help="vlm: the served checkpoint's family (uitars15, qwen25vl, guiowl, agentcpm, mobiler1), "
            "sent its own published prompt; implies --policy vlm. Default: policy.family of the run config."
        ),
    ] = None,
    backend: Annotated[str, typer.Option(help="sim, web (Chromium) or android (adb).")] = "sim",
    workers: Annotated[int, typer.Option(min=1, max=256, help="Devices and episodes in flight.")] = 2,
    max_steps: Annotated[int, typer.Option(min=1, max=500)] = 30,
    noise: Annotated[float, typer.Option(min=0, max=1, help="noisy-oracle: each error mode's rate.")] = 0.05,
    serial: Annotated[
        list[str] | None, typer.Option(help="android: a device serial (repeat for more).")
    ] = None,
    adb: Annotated[str, typer.Option(help="android: the adb executable.")] = "adb",
    config: ConfigOpt = None,
) -> None:
    """Roll out a policy on the device farm; a rerun resumes the unfinished round."""
    from flows.rollout_cmd import run_rollout  # heavy imports only for this command

    run_rollout(
        app_ref,
        queries,
        rollouts_per_query,
        policy,
        backend,
        workers,
        max_steps,
        noise,
        config,
        serials=serial,
        adb=adb,
        family=family,
    )


@app.command("config")
def show_config(config: ConfigOpt = None) -> None:
    """Print the effective settings, secrets masked; exit 1 if the database URL cannot be used
    (malformed, or a database trajforge does not support). `check` also connects."""
    from storage.db import create_db_engine

    settings = cli_settings(config)
    dump = settings.model_dump(mode="json")
    dump["db"]["url"] = redact_url(settings.db_url)
    for name, section in dump.items():
        if isinstance(section, dict):
            for key, value in section.items():
                typer.echo(redact(f"{name}.{key} = {value}"))
        else:
            typer.echo(redact(f"{name} = {section}"))
    create_db_engine(settings.db_url, make_folder=False).dispose()  # a ConfigError names the fix


@app.command("run")
def run(
    config: ConfigOpt = None,
    queries: Annotated[int, typer.Option(min=1, max=1000, help="New queries per built-in app.")] = 2,
    rollouts: Annotated[int, typer.Option(min=1, max=64, help="Rollouts per query.")] = 4,
) -> None:
    """One smoke round on the configured spine: the quickest end-to-end check, no training.

    The noisy oracle on every built-in app, through codecs, content-addressed screenshots,
    bulk writes, the offline critics and verifier anchors, then CSRS extraction and
    curation (`evolve.smoke`). The main job, the self-evolving loop, is `trajforge evolve`.
    """
    from evolve.smoke import run_smoke_round

    configure_logging(logging.INFO)
    settings = hold_home(cli_settings(config))
    report = run_smoke_round(settings, queries_per_app=queries, rollouts=rollouts)
    typer.echo(report.render())


@app.command("evolve")
def evolve_cmd(
    rounds: Annotated[
        int | None,
        typer.Option("--rounds", min=1, help="Bring the loop to this many rounds (default: config)."),
    ] = None,
    config: ConfigOpt = None,
    report_dir: Annotated[
        Path | None, typer.Option("--report", help="Where the report goes (default: HOME/report).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", help="Prefect's own logs too.")] = False,
) -> None:
    """Run the self-evolving loop as Prefect flows: each round generates queries, rolls out the
    round's policy, judges, calibrates, curates, publishes a dataset version and trains the next
    policy. Rerun after a crash: finished work is not redone."""
    from evolve.ownership import check_loop_rounds, loop_lock
    from evolve.spine import check_run_apps, open_spine
    from rollout.suites import probe_tasks

    settings = cli_settings(config)
    target = rounds or settings.evolve.rounds
    check_run_apps(settings)  # every spec and suite file loads, before the home is made
    # Reach the database and the store: a bad URL or a server down is one line, not a flow's tracebacks
    spine = open_spine(settings)  # migrates, so it connects
    spine.store  # noqa: B018 (reaching it is the check)
    spine.apps  # noqa: B018 (every spec loads, before round 1)
    probe_tasks(spine.suites)  # every suite task exists and its environment words it, before round 1
    if not settings.llm.offline:  # each stage group's endpoint serves its model, before anything runs
        from trajforge.probe import probe_endpoints

        probe_endpoints(settings.llm)
    check_loop_rounds(settings)
    with loop_lock(settings, "trajforge evolve"), stop_on_signals():
        try:
            _evolve_rounds(settings, target, report_dir, verbose)
        except Stopped as stop:
            typer.echo(
                f"stopped by {stop.by} at a step boundary: what was stored is kept; "
                "rerun `trajforge evolve` to resume",
                err=True,
            )
            raise typer.Exit(stop.exit_code) from None


def _evolve_rounds(settings: Settings, target: int, report_dir: Path | None, verbose: bool) -> None:
    """The rounds of `evolve`, under the dataset's loop lock."""
    import time

    from evolve.spine import open_spine

    spine = open_spine(settings)
    prefect_env(settings, verbose)
    from curation.curriculum import curriculum_line
    from curation.recovery import recovery_line
    from evolve.heldout import heldout_line
    from evolve.report import success_text, write_report
    from flows.rounds import round_flow  # imports Prefect, which sets its logging up
    from storage.llm_cache import per_step_line

    if not verbose:  # Prefect's records, a failed task's traceback among them: to the home's log file
        records_to_file(settings)

    typer.echo(
        f"evolving to {target} rounds on {redact_url(settings.db_url)} (runner: {settings.evolve.runner})"
    )
    for number in range(1, target + 1):
        started = time.monotonic()
        typer.echo(f"round {number}/{target}: running…")
        with shown():
            result = call_stoppable(prefect_call, round_flow(settings), settings, number)
        per_app = ", ".join(f"{a} {w}/{n}" for a, (w, n) in result["per_app"].items())
        state = "already done" if result.get("skipped") else f"{time.monotonic() - started:.0f}s"
        typer.echo(
            f"round {number}/{target}: policy {result['policy']}: success "
            f"{success_text(result['success_rate'], result.get('model_faults', 0))} "
            f"({result['successes']}/{result['episodes']}; {per_app}); dataset "
            f"{result.get('dataset', '?')} v{result.get('dataset_version', '?')}; next policy "
            f"{result.get('next_policy', '?')} [{state}]"
        )
        if result.get("calls_per_step"):
            typer.echo(f"  model calls per step: {per_step_line(result['calls_per_step'])}")
        if result.get("curriculum"):
            typer.echo(f"  curriculum: {curriculum_line(result['curriculum'])}")
        if rec := result.get("recovery"):
            typer.echo(f"  recovery: {recovery_line(rec)}")
        if line := heldout_line(result):
            typer.echo(f"  held-out: {line}")
    index = write_report(spine.sessions, spine.store, report_dir or settings.home / "report")
    typer.echo(f"report: {index.resolve().as_uri()}")


@app.command("report")
def report_cmd(
    out: Annotated[Path, typer.Option("--out", help="Directory for index.html and the plots.")],
    config: ConfigOpt = None,
) -> None:
    """Write the round report: success, pass rates, critics vs anchors, dedup, samples, drops,
    tokens and cost, dataset versions and lineage, example trajectories."""
    from evolve.report import write_report

    _, sessions, store = cli_spine(config)
    typer.echo(f"report: {write_report(sessions, store, out).resolve().as_uri()}")


app.command("check")(check_cmd)
app.command("stage")(stage_cmd)
app.command("serve")(serve_cmd)
app.command("status")(status_cmd)


def main() -> None:
    """Console-script entry point: a TrajforgeError, or a database that cannot be used, is one line."""
    from sqlalchemy.exc import DatabaseError, OperationalError

    sys.stdout = RedactingStream(sys.stdout)
    sys.stderr = RedactingStream(sys.stderr)
    one_blas_thread()  # for the whole command: its parallelism is its own workers'
    try:
        app()  # standalone: usage errors print themselves and exit 2
    except TrajforgeError as exc:
        log = log_file()
        typer.echo(redact(f"error: {exc}{f' (details: {log})' if log else ''}"), err=True)
        sys.exit(1)
    except DatabaseError as exc:
        if not isinstance(exc, OperationalError) and type(exc) is not DatabaseError:
            raise  # an IntegrityError and the like is a bug: keep its traceback
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
        typer.echo(redact(f"error: the database failed: {reason}; run `trajforge check`"), err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
