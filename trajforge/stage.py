"""The stage: the unit the loop, the CLI and Prefect all run.

A stage is declared as data beside the code it runs (`querygen/stages.py`, `rollout/stages.py`,
`critics/stages.py`, `curation/stages.py`, `publish/stages.py`, `publish/train.py`, and the loop's
own start, finish and gate in `evolve/`): its name, the tables it reads and writes, the stages
that must have run on the round before it, and `run(ctx, number, given) -> Report`. `ctx` is the
round's context (`storage.context.RoundContext`); `given` holds the earlier stages' reports by
name, as JSON, and `part` for one part of a fanned-out stage.

`evolve.stages.ROUND` keeps only their order. The round flow (`flows/rounds.py`) runs each one as a
Prefect task of one generic kind, `trajforge stage NAME` runs one alone, and the runner, not the
stage, keeps each finished stage's report (`storage.rounds.record`). Those reports are the one
record of what a round has been through: a resumed round does not run a stage again, a stage runs
only after those it names, and publishing seals only rounds that have been through judging,
calibration and curation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from trajforge.errors import ConfigError

Ctx = TypeVar("Ctx", contravariant=True)
Given = Mapping[str, Any]  # the earlier stages' reports by stage name; `part` for a part of a fan-out
PART = "part"
DEVICES = "trajforge-devices"  # the Prefect tag of stages that lease devices
MODEL_CALLS = "trajforge-model-calls"  # the Prefect tag of stages that may call model endpoints


class Report(Protocol):
    """What a stage returns: one line (or a few) for a person, and JSON for the round's record."""

    def render(self) -> str: ...

    def as_json(self) -> Any: ...


@dataclass(frozen=True)
class Facts:
    """A report that is its JSON, for stages whose figures are a small dict (or a list of uids)."""

    data: Any
    line: str = ""

    def render(self) -> str:
        return self.line or str(self.data)

    def as_json(self) -> Any:
        return self.data


@dataclass(frozen=True)
class Stage(Generic[Ctx]):
    """One stage of the round.

    `fan_out`, where set, splits the stage into parts (lists of uids) that run as separate tasks
    on the configured runner, each as `run` with `given[PART]`; `merge` makes the stage's report
    from the parts' JSON (no parts: `merge([])`, and no task runs).
    """

    name: str  # in `after`, in `trajforge stage NAME` and in the round's record of reports
    label: str  # the Prefect task's name and the progress line's
    run: Callable[[Ctx, int, Given], Report]
    reads: tuple[str, ...] = ()  # tables
    writes: tuple[str, ...] = ()
    after: tuple[str, ...] = ()  # stages that must have run on the round first (kept their reports)
    needs: tuple[str, ...] = ()  # the earlier stages whose reports it reads from `given`
    tags: tuple[str, ...] = ()  # Prefect tags: what it holds (devices, model calls)
    fan_out: Callable[[Ctx, int, Given], list[list[str]]] | None = None
    merge: Callable[[list[Any]], Any] | None = None
    resumable: bool = True  # a finished run's report is kept, and a resumed round reuses it


def split(items: list[str], n: int) -> list[list[str]]:
    """Round-robin parts of a fan-out (balanced by position, stable for a given list)."""
    return [part for part in (items[i::n] for i in range(max(1, n))) if part]


def one_or_none(parts: list[Any]) -> Any:
    """The report of a stage that runs as one part or not at all: that part's, or `{}`."""
    return parts[0] if parts else {}


def sum_counts(parts: list[Any]) -> dict[str, Any]:
    """The parts' figures added up, key by key (the numbers among them)."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = out.get(key, 0) + value
    return out


def check_order(stages: Sequence[Stage[Any]], inputs: Sequence[str]) -> None:
    """Raises ConfigError where a stage comes before a stage it needs, or reads a table that
    neither the round's inputs nor an earlier stage provide."""
    seen: set[str] = set()
    written = set(inputs)
    for stage in stages:
        if missing := [a for a in stage.after if a not in seen]:
            raise ConfigError(f"stage {stage.name!r} runs before {', '.join(missing)}, which it needs")
        if unread := sorted(set(stage.reads) - written):
            raise ConfigError(
                f"stage {stage.name!r} reads {', '.join(unread)}, which no earlier stage writes"
            )
        seen.add(stage.name)
        written |= set(stage.writes)
