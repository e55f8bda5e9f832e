"""Desktop tasks in YAML, in the style of OSWorld's task files: a setup, an instruction with
parameters per seed, and an evaluator of getters and metrics.

    calc-add:
      instruction: "Compute {a} + {b} with the calculator."
      params: {a: {from: 2, to: 99}, b: [3, 5, 7]}
      setup:
        - launch: [galculator]
      check:
        - get: {element: {role: text}}
          numeric: "{a} + {b}"

`params` gives each parameter a list of values or an integer range; a seed picks one value of
each (the same seed, the same task instance). Every string in `setup` and `check` may name them.

Setup steps, run in order in the episode's fresh home folder (paths are relative to it):
`write: {path, text}`, `run: [argv]` (waits at most 60 s for it to exit 0), `launch: [argv]`
(waits for the app's first window and fills the display with it), `type: TEXT` (into the focused
window; each newline in it is a press of Return), `key: KEYS` (xdotool's names, e.g. `ctrl+a`) and
`wait: SECONDS` (at most 60, for an app that needs a moment after a key).

Getters: `file: PATH` (its text), `exists: PATH` ("true"/"false"), `cell: {file, ref}` (a cell of a
saved spreadsheet, any format ssconvert reads), `window_title: true` (the title of the newest
window of the app launched last that still shows one) or `window_title: {launch: PROGRAM}` (of
the app a `launch:` step started as PROGRAM), and `element: {role, name, focused, index}` (the
text, else the name, of the showing AT-SPI nodes of that role, in the tree's order: with `name`,
only those so named; with `focused: true`, only the one with the keyboard focus; `index` picks
among them, 0 the first, -1 the last). Metrics, one per check: `exact`, `contains`, `regex` and
`numeric` (an arithmetic expression of the params, met within `tolerance`).

`max_steps` on a task (or on its suite) is the most steps its episodes take, instead of the run's
`evolve.max_steps`.
"""

from __future__ import annotations

import ast
import csv
import io
import operator
import posixpath
import random
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trajforge.errors import ConfigError


class Range(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    start: int = Field(alias="from")
    to: int


class Write(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    text: str


class SetupStep(BaseModel):
    """One setup step: exactly one of its fields."""

    model_config = ConfigDict(extra="forbid")

    write: Write | None = None
    run: list[str] | None = None
    launch: list[str] | None = None
    type: str | None = None
    key: str | None = None
    wait: float | None = Field(None, gt=0, le=60, description="Seconds to wait.")

    @model_validator(mode="after")
    def _one(self) -> SetupStep:
        given = [k for k in STEP_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a setup step has exactly one of {', '.join(STEP_KINDS)}; got {given}")
        return self


STEP_KINDS = ("write", "run", "launch", "type", "key", "wait")


class ElementRef(BaseModel):
    """Which AT-SPI node an `element` getter reads (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    role: str
    name: str | None = None
    focused: bool = False
    index: int = 0


class WindowRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    launch: str = Field(description="The program a `launch:` step started (its first word's name).")


class CellRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str
    ref: str = Field(description="The cell, `B2`; may name params (`{cell}`).")


class Getter(BaseModel):
    """What a check reads of the finished episode: exactly one of its fields."""

    model_config = ConfigDict(extra="forbid")

    file: str | None = None
    exists: str | None = None
    cell: CellRef | None = None
    window_title: bool | WindowRef | None = None
    element: ElementRef | None = None

    @model_validator(mode="after")
    def _one(self) -> Getter:
        given = [k for k in type(self).model_fields if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"a getter has exactly one of file, exists, cell, window_title, element; got {given}"
            )
        return self


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid")

    get: Getter
    exact: str | None = None
    contains: str | None = None
    regex: str | None = None
    numeric: str | None = None
    tolerance: float = Field(1e-6, ge=0)

    @model_validator(mode="after")
    def _one(self) -> Check:
        given = [k for k in METRICS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a check has exactly one metric of {', '.join(METRICS)}; got {given}")
        return self

    def metric(self) -> tuple[str, str]:
        name = next(k for k in METRICS if getattr(self, k) is not None)
        return name, str(getattr(self, name))


class DesktopTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instruction: str = Field(min_length=1)
    params: dict[str, list[str | int | float] | Range] = Field(default_factory=dict)
    setup: list[SetupStep] = Field(min_length=1)
    check: list[Check] = Field(min_length=1)
    max_steps: int | None = Field(None, ge=1, le=500, description="Instead of the suite's or the run's.")

    @model_validator(mode="after")
    def _renders(self) -> DesktopTask:
        """Every string names only the task's params, and every path stays in the episode's home:
        checked on a sample of the params when the suite loads (`trajforge check`, evolve's
        preflight), not when an episode first reaches it."""
        params = self.instance("", 0)
        launched = {PurePosixPath(step.launch[0]).name for step in self.setup if step.launch}
        for i, check in enumerate(self.check, 1):
            title = check.get.window_title
            if isinstance(title, WindowRef) and PurePosixPath(title.launch).name not in launched:
                raise ValueError(
                    f"check {i}: window_title names {title.launch!r}, which no `launch:` step starts "
                    f"(launched: {', '.join(sorted(launched)) or 'nothing'}); name one of them"
                )
        for where, template, is_path in self._templates():
            try:
                text = fill(template, params)
            except ConfigError as exc:
                raise ValueError(f"{where}: {str(exc).removeprefix('desktop task: ')}") from None
            if is_path and (
                PurePosixPath(text).is_absolute() or posixpath.normpath(text).split("/")[0] == ".."
            ):
                raise ValueError(f"{where}: path {text!r} leaves the episode's home; give a path inside it")
        return self

    def _templates(self) -> Iterator[tuple[str, str, bool]]:
        """(where, template, whether it is a path) of every string the task fills with its params."""
        yield "instruction", self.instruction, False
        for i, step in enumerate(self.setup, 1):
            if step.write is not None:
                yield f"setup step {i}", step.write.path, True
                yield f"setup step {i}", step.write.text, False
            for arg in step.run or step.launch or []:
                yield f"setup step {i}", arg, False
            for text in (step.type, step.key):
                if text is not None:
                    yield f"setup step {i}", text, False
        for i, check in enumerate(self.check, 1):
            get = check.get
            for path in (get.file, get.exists, get.cell.file if get.cell else None):
                if path is not None:
                    yield f"check {i}", path, True
            for text in (get.cell.ref if get.cell else None, get.element.name if get.element else None):
                if text is not None:
                    yield f"check {i}", text, False
            yield f"check {i}", check.metric()[1], False

    def instance(self, name: str, seed: int) -> dict[str, str]:
        """The parameters of seed `seed`: one value of each, the same for the same (task, seed)."""
        rng = random.Random(f"{name}\x00{seed}")
        out: dict[str, str] = {}
        for key in sorted(self.params):
            values = self.params[key]
            out[key] = str(
                rng.randint(values.start, values.to) if isinstance(values, Range) else rng.choice(values)
            )
        return out


def fill(template: str, params: dict[str, str]) -> str:
    """`template` with its `{param}`s filled; an unknown one is a ConfigError naming it."""
    try:
        return template.format(**params)
    except KeyError as exc:
        raise ConfigError(
            f"desktop task: {template!r} names {exc.args[0]!r}, which is not one of its params "
            f"({', '.join(params) or 'none'}); add it to `params`"
        ) from exc
    except (IndexError, ValueError) as exc:
        raise ConfigError(
            f"desktop task: {template!r} is not a valid template ({exc}); write {{{{ for a brace"
        ) from exc


# --- the metrics -------------------------------------------------------------------------------------
_OPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


def arithmetic(expression: str) -> float:
    """The value of an arithmetic expression (numbers, + - * / ** and parentheses), never `eval`."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
        raise ConfigError(f"numeric check {expression!r}: only numbers and + - * / ** are allowed")

    try:
        return value(ast.parse(expression, mode="eval").body)
    except SyntaxError as exc:
        raise ConfigError(f"numeric check {expression!r} is not an arithmetic expression") from exc


def number(text: str) -> float | None:
    """A number shown as text (`1,234.5`, ` 42 `), or None."""
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def meets(metric: str, got: str, expected: str, tolerance: float) -> bool:
    if metric == "exact":
        return got.strip() == expected.strip()
    if metric == "contains":
        return expected in got
    if metric == "regex":
        return re.search(expected, got) is not None
    value = number(got)
    return value is not None and abs(value - arithmetic(expected)) <= tolerance


METRICS = ("exact", "contains", "regex", "numeric")


# --- the getters that read files -----------------------------------------------------------------------
def read_cell(path: Path, ref: str) -> str | None:
    """The text of cell `ref` (`B2`) in a saved spreadsheet: CSV directly, other formats through
    gnumeric's ssconvert; None when the file or the cell is not there."""
    if not path.is_file():
        return None
    if path.suffix.lower() == ".csv":
        text = path.read_text(encoding="utf-8", errors="replace")
    else:
        try:
            done = subprocess.run(
                ["ssconvert", "--export-type=Gnumeric_stf:stf_csv", str(path), "fd://1"],
                capture_output=True,
                timeout=30,
            )
        except FileNotFoundError as exc:
            raise ConfigError(
                "a `cell` check of a non-CSV file needs ssconvert; apt-get install gnumeric"
            ) from exc
        text = done.stdout.decode("utf-8", errors="replace")
    match = re.fullmatch(r"([A-Z]{1,3})([1-9][0-9]*)", ref.strip().upper())
    if match is None:
        raise ConfigError(f"cell check: {ref!r} is not a cell reference; write it like B2")
    letters, row = match.groups()
    col = 0
    for ch in letters:
        col = col * 26 + ord(ch) - ord("A") + 1
    rows = list(csv.reader(io.StringIO(text)))
    r, c = int(row) - 1, col - 1
    return rows[r][c] if r < len(rows) and c < len(rows[r]) else None
