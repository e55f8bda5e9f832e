"""The round's order of stages, and running one.

Each stage is declared beside its code (`trajforge.stage.Stage`): `querygen/stages.py`,
`rollout/stages.py`, `critics/stages.py`, `curation/stages.py`, `publish/stages.py` and
`publish/train.py`; the loop keeps its own, the round's start and finish (`evolve/steps.py`) and
the gate (`evolve/heldout.py`).
`ROUND` keeps only their order; `check_order` proves it sound (every stage after the stages it
needs, every table it reads an input of the round or written by an earlier stage), and the flow
checks it before a round starts.

Running one is `run_stage`, the one runner, for the round flow (`flows/rounds.py`, whose parts are
Prefect tasks), `trajforge stage NAME` and its aliases (`trajforge critics calibrate`, `trajforge
datasets publish`), the tests and the bench: a stage the round keeps a report of is not run again;
otherwise `require` before it writes anything (a stage run out of order fails with one line naming
the command that does what is missing), then its parts, the merge, and `record`, which keeps its
report in the round so that a resumed round reuses it instead of running the stage again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from critics.stages import CALIBRATE, JUDGE
from curation.stages import CURATE, ENCODER, FEATURISE
from evolve.heldout import PROMOTE
from evolve.spine import Spine
from evolve.steps import FINISH, START
from publish.stages import PUBLISH
from publish.train import TRAIN
from querygen.stages import QUERIES
from rollout.stages import EXPLORE, GUIDED_DEMOS, REGISTER_DEVICES, ROLLOUT
from storage.rounds import not_through, record, recorded
from trajforge.errors import ConfigError, StageError
from trajforge.stage import PART, Given, Report, Stage
from trajforge.stage import check_order as check_stages

INPUTS = ("app",)  # what a round starts from: the configured apps (and suite tasks)

ROUND: tuple[Stage[Spine], ...] = (
    START,
    QUERIES,
    REGISTER_DEVICES,
    ROLLOUT,
    GUIDED_DEMOS,
    EXPLORE,
    JUDGE,
    CALIBRATE,
    ENCODER,
    FEATURISE,
    CURATE,
    PUBLISH,
    TRAIN,
    PROMOTE,
    FINISH,
)
BY_NAME = {stage.name: stage for stage in ROUND}


def stage_named(name: str) -> Stage[Spine]:
    """The stage called `name`; ConfigError naming the stages there are otherwise."""
    if name not in BY_NAME:
        raise ConfigError(f"no stage {name!r}; the stages are {', '.join(BY_NAME)}")
    return BY_NAME[name]


def check_order(stages: Sequence[Stage[Any]] = ROUND) -> None:
    """Raises ConfigError where a stage comes before a stage it needs, or reads a table that
    neither the round's inputs nor an earlier stage provide."""
    check_stages(stages, INPUTS)


def require(done: Mapping[str, Any], number: int, name: str) -> None:
    """Raises StageError, naming the command to run, when a stage that `name` runs after has not run
    on round `number`: `done`, the reports the round keeps (`storage.rounds.recorded`), has none of it."""
    for before in BY_NAME[name].after:
        if before not in done:
            raise StageError(not_through(number, before))


Parts = Callable[[Stage[Spine], int, list[Given]], list[Any]]  # runs a stage's parts, returns their JSON


def in_order(ctx: Spine, seen: Callable[[Report], None] | None = None) -> Parts:
    """Parts run in this process one after another (the CLI, the tests, the bench, the smoke round);
    `seen` gets each part's report as the stage returned it."""

    def run(stage: Stage[Spine], number: int, parts: list[Given]) -> list[Any]:
        out = []
        for given in parts:
            report = stage.run(ctx, number, given)
            if seen is not None:
                seen(report)
            out.append(report.as_json())
        return out

    return run


def run_stage(
    ctx: Spine,
    stage: Stage[Spine],
    number: int,
    given: Given,
    parts: Parts | None = None,
    again: bool = False,
) -> Any:
    """Run one stage of round `number`: the one runner, for the round flow (whose `parts` are Prefect
    tasks), `trajforge stage NAME` and its aliases, the tests and the bench. A stage whose report the
    round keeps is not run again (unless `again`); otherwise its prerequisites are checked before it
    writes anything, its parts run (`parts`, by default in this process), merge, and its report is kept.

    Raises:
        StageError: a stage it needs has not run on the round, or has kept no report to read.
    """
    done = recorded(ctx.sessions, number)
    if stage.resumable and not again and stage.name in done:
        return done[stage.name]
    require(done, number, stage.name)
    if missing := [name for name in stage.needs if name not in given]:
        raise StageError(
            f"stage {stage.name} reads the reports of {', '.join(missing)}, which round {number} has not "
            f"kept; run `trajforge stage {missing[0]} --round {number}` first (or `trajforge evolve`)"
        )
    if stage.fan_out is None:
        report = (parts or in_order(ctx))(stage, number, [dict(given)])[0]
    else:
        assert stage.merge is not None, f"stage {stage.name} fans out with no merge"
        inputs: list[Given] = [{**given, PART: part} for part in stage.fan_out(ctx, number, given)]
        report = stage.merge((parts or in_order(ctx))(stage, number, inputs) if inputs else [])
    if stage.resumable:
        record(ctx.sessions, number, stage.name, report)
    return report
