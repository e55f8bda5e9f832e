"""The error of what the critics publish, kept under a target (`critics.trust: error`, the default).

The question is not whether one task's verdicts can be certified alone (24 right of 24 has a Wilson
lower bound of 86%), but whether everything the critics decide this round, taken together, is wrong
at most `critics.max_label_error` of the time. The rule (an empirical-Bayes, cell-wise version of
selective risk control):

- **Cells.** Every consensus verdict falls in a cell: its task, its verdict (success or failure) and
  its confidence band (`BANDS`). A cell's *kind* is the cell without its task.
- **Evidence, pooled.** A kind's error is estimated from every task's labelled verdicts of that kind
  (each verdict as the consensus gave it without its own label); that is the prior of each of its
  cells, Beta(s q, s (1 - q)) with q the other tasks' error rate (Jeffreys-smoothed) and s
  `PRIOR_STRENGTH` (at most the other tasks' labels). The cell's own labels update it. So a task
  nobody labelled is decided only where its kind has been shown right across tasks, and a task's own
  labels move its cells towards its own record.
- **Tasks that show the critic wrong are held back.** A task and verdict whose own labels' error has
  a Wilson lower bound above the target decides nothing of that verdict, whatever the prior says.
- **The largest set under the target.** Cells are taken in order of their estimated error, lowest
  first; a cell joins the decided set when the set's error stays under the target at its upper
  bound: the size-weighted mean of the cells' estimates plus `Z` (one-sided 95%) standard deviations,
  counting each kind's uncertainty as shared by its cells (a kind misjudged is misjudged everywhere)
  and the binomial draw of the unlabelled episodes themselves. That upper bound is the error the
  rule claims.

What it guarantees, and what not: if the labelled verdicts of each cell are a random sample of it
(the label queue draws at random within a cell, `teaching_order`), the claimed error bounds the
realised error of the decided set at about 95% confidence, up to the Beta prior being right about
how much tasks differ. It does not certify any one task. Not yet built: an audit of a random sample
of what was decided, in its own queue, whose verdicts measure the realised error every round.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass, field

from critics.consensus import Anchored, Evidence
from critics.precision import verdict_of
from trajforge.metrics import wilson

BANDS = (0.75, 0.9, 0.97, 0.99)  # confidence band edges: a cell's kind is (verdict, band)
MIN_STRENGTH, MAX_STRENGTH = 1.0, 200.0
MIN_TASK_LABELS = 3  # a task's error in a kind enters the spread with this many labels of it
Z = 1.645  # one-sided 95%


Kind = tuple[bool, int, int]  # verdict, confidence band, dissenting channels (2 for two or more)
CellKey = tuple[str, bool, int, int]  # the task, then the kind


@dataclass(frozen=True)
class Judged:
    """A consensus verdict: on an unlabelled episode (`right` None), or on a labelled one as the
    consensus gave it without that label (`right`: whether it agreed)."""

    episode_id: int
    task: str
    success: bool
    confidence: float
    right: bool | None = None
    dissent: int = 0  # voting channels that said the other verdict

    @property
    def kind(self) -> Kind:
        return self.success, sum(self.confidence >= edge for edge in BANDS), min(self.dissent, 2)

    @property
    def cell(self) -> CellKey:
        return (self.task, *self.kind)


@dataclass
class Cell:
    key: CellKey
    unlabelled: list[int] = field(default_factory=list)
    wrong: int = 0
    labelled: int = 0
    estimate: float = 1.0  # the posterior mean of its error
    variance: float = 0.0  # the posterior variance of the cell's own part
    shared: float = 0.0  # the prior's weight in the estimate times the sd of the kind's pooled error
    held_back: bool = False


@dataclass(frozen=True)
class Decision:
    decided: frozenset[int]  # unlabelled episodes the critics may decide
    chosen: frozenset[CellKey]  # the cells they are in
    claimed: float | None  # the upper bound of their error (None when nothing is decided)
    estimate: float | None  # its point estimate
    cells: dict[CellKey, Cell]


def estimate_cells(judged: list[Judged], max_error: float) -> dict[CellKey, Cell]:
    """Every cell with its unlabelled episodes, own labels, posterior error and hold-back."""
    cells: dict[CellKey, Cell] = {}
    per_task: dict[Kind, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    verdict_labels: dict[tuple[str, bool], list[int]] = defaultdict(lambda: [0, 0])  # wrong, labelled
    for j in judged:
        cell = cells.setdefault(j.cell, Cell(j.cell))
        if j.right is None:
            cell.unlabelled.append(j.episode_id)
            continue
        cell.labelled += 1
        cell.wrong += not j.right
        for tally in (per_task[j.kind][j.task], verdict_labels[(j.task, j.success)]):
            tally[0] += not j.right
            tally[1] += 1
    for key, cell in cells.items():
        tasks = per_task.get(key[1:], {})
        others = sum(n for _, n in tasks.values()) - cell.labelled
        q = (sum(w for w, _ in tasks.values()) - cell.wrong + 0.5) / (others + 1)
        s = min(strength(list(tasks.values())), float(others)) if others else MIN_STRENGTH
        a, b = s * q + cell.wrong, s * (1 - q) + cell.labelled - cell.wrong
        cell.estimate = a / (a + b)
        cell.variance = a * b / ((a + b) ** 2 * (a + b + 1))
        cell.shared = s / (s + cell.labelled) * math.sqrt(q * (1 - q) / (others + 1))
        shown = verdict_labels[(key[0], key[1])]
        cell.held_back = (wilson(shown[0], shown[1]) or [0.0])[0] > max_error
    return cells


def strength(tasks: list[list[int]]) -> float:
    """How many labels the other tasks' error rate in a kind is worth to a task: from how far the
    tasks' own rates ([wrong, labelled] each) spread around the pooled one beyond what sampling
    explains (s = mu (1 - mu) / tau^2 - 1); the weakest where fewer than two tasks can say."""
    shown = [(w, n) for w, n in tasks if n >= MIN_TASK_LABELS]
    if len(shown) < 2:
        return MIN_STRENGTH
    mu = (sum(w for w, _ in shown) + 0.5) / (sum(n for _, n in shown) + 1)
    spread = sum((w / n - mu) ** 2 for w, n in shown) / (len(shown) - 1)
    tau2 = spread - sum(mu * (1 - mu) / n for _, n in shown) / len(shown)
    if tau2 <= 0:
        return MAX_STRENGTH
    return min(MAX_STRENGTH, max(MIN_STRENGTH, mu * (1 - mu) / tau2 - 1))


def claimed_error(cells: list[Cell]) -> tuple[float, float]:
    """The point estimate and upper bound of the error of deciding every unlabelled episode of
    `cells` (module docstring)."""
    size = sum(len(c.unlabelled) for c in cells)
    if not size:
        return 0.0, 0.0
    mean = sum(len(c.unlabelled) * c.estimate for c in cells) / size
    by_kind: dict[Kind, float] = defaultdict(float)
    draw = 0.0
    for c in cells:
        m = len(c.unlabelled)
        by_kind[c.key[1:]] += m * math.sqrt(c.variance)  # shared within a kind: sd adds up
        draw += m * c.estimate * (1 - c.estimate)
    variance = (sum(sd * sd for sd in by_kind.values()) + draw) / (size * size)
    return mean, mean + Z * math.sqrt(variance)


def decide(judged: list[Judged], max_error: float) -> Decision:
    """The largest set of unlabelled episodes, cell by cell, whose claimed error stays under
    `max_error`."""
    cells = estimate_cells(judged, max_error)
    chosen: list[Cell] = []
    candidates = [c for c in cells.values() if c.unlabelled and not c.held_back]
    for cell in sorted(candidates, key=lambda c: (c.estimate, -len(c.unlabelled), c.key)):
        if claimed_error([*chosen, cell])[1] <= max_error:
            chosen.append(cell)
    if not chosen:
        return Decision(frozenset(), frozenset(), None, None, cells)
    mean, upper = claimed_error(chosen)
    decided = frozenset(e for c in chosen for e in c.unlabelled)
    return Decision(decided, frozenset(c.key for c in chosen), upper, mean, cells)


def teaching_order(judged: list[Judged], max_error: float, seed: int) -> list[int]:
    """Unlabelled episodes in the order a person should label them: first from the cells whose labels
    could let the most be decided (the undecided cell with the most episodes and the lowest estimated
    error, the cells already decided after them: their labels audit), one cell at a time round the
    tasks; within a cell at random, so that a cell's labels stay a fair sample of it."""
    decision = decide(judged, max_error)
    rng = random.Random(seed)
    by_task: dict[str, list[Cell]] = defaultdict(list)
    for cell in decision.cells.values():
        if cell.unlabelled:
            by_task[cell.key[0]].append(cell)

    def gain(c: Cell) -> tuple[bool, bool, float, CellKey]:
        return c.key in decision.chosen, c.held_back, -len(c.unlabelled) * (1 - c.estimate), c.key

    queues = []
    for task in sorted(by_task):
        order = []
        for cell in sorted(by_task[task], key=gain):
            episodes = sorted(cell.unlabelled)
            rng.shuffle(episodes)
            order.extend(episodes)
        queues.append(order)
    return _interleave(queues)


def _interleave(lists: list[list[int]]) -> list[int]:
    """Round-robin over `lists`: the first item of each, then the second of each, ..."""
    out: list[int] = []
    for i in range(max((len(x) for x in lists), default=0)):
        out.extend(x[i] for x in lists if i < len(x))
    return out


def judge_episodes(episodes: list[Anchored], known: set[int], minimum: int) -> list[Judged]:
    """The consensus verdict on each episode, the channels weighed by the labelled ones (`known`). A
    labelled episode is put in the cell its votes give with every label counted, as an unlabelled one
    with the same votes is, and is right or wrong by the verdict given without its own label (left out,
    a wrong verdict's own label would move it to another, surer band). With no channel calibrated yet,
    the verdict of AND at confidence one half (the lowest band)."""
    evidence = Evidence(minimum)
    for a in episodes:
        if a.episode_id in known:
            evidence.add(a)
    out = []
    for a in episodes:
        success, confidence = _verdict(evidence, a, None)
        right = None
        if a.episode_id in known:
            right = _verdict(evidence, a, a.actual)[0] == a.actual
        dissent = sum(vote != success for vote in a.votes.values())
        out.append(Judged(a.episode_id, a.app, success, confidence, right, dissent))
    return out


def _verdict(evidence: Evidence, a: Anchored, own: bool | None) -> tuple[bool, float]:
    said = verdict_of(evidence, a, own)
    return said if said is not None else (bool(a.votes) and all(a.votes.values()), 0.5)


def ceiling(judged: list[Judged], actual: dict[int, bool], max_error: float) -> dict[str, int]:
    """The hindsight ceiling: the most unlabelled episodes that whole cells could decide at
    `max_error`, knowing the truth (the cells taken by their true error, lowest first), pooled and by
    task."""
    cells: dict[CellKey, list[bool]] = defaultdict(list)
    for j in judged:
        if j.right is None:
            cells[j.cell].append(j.success == actual[j.episode_id])
    taken: dict[str, int] = defaultdict(int)
    size = wrong = 0
    for key, right in sorted(cells.items(), key=lambda kv: (1 - sum(kv[1]) / len(kv[1]), kv[0])):
        if wrong + right.count(False) <= max_error * (size + len(right)):
            size, wrong = size + len(right), wrong + right.count(False)
            taken[key[0]] += len(right)
    return dict(taken) | {"pooled": size}
