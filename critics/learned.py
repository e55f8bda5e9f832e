"""An offline trajectory critic that learns from the anchors (UI-Genie's reward model, GUI-Critic-R1's
idea, sized for a CPU).

It reads only a `CriticView` (the instruction, screenshots by hash, the element trees as the
device reported them, the actions), turns an episode into observation features, and fits a
ridge-regularised logistic regression on anchored episodes (a verifier's or a human's
verdict). The features say how the task's words and quoted values were covered by what was
tapped and typed and by the screens shown, how the run ended (a success claim, giving up,
running out), and how much of it went nowhere (no-op actions, repeated screens, misses,
unparsed output), and the elements the task names (`critics.task_words`): those shown but never
tapped, a named switch's end state against the one asked, each of the task's parts acted on,
typing that was asked for, a run that ends by pressing back. Nothing in them names an app, a
widget or a task, so a critic trained on some apps judges others; each feature's weight is held
to the side its evidence points (`SIGNS`).

`cross_judge` gives every episode a verdict from a model that never saw an episode of its query
(k folds by query), so its measured accuracy is out of sample by construction. It calls an episode
a success at `SUCCESS_AT`, above even odds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from critics.task_words import (
    GENERIC,
    ROLE_WORDS,
    clause_texts,
    clauses,
    goes_away,
    is_commit,
    name_in_task,
    part_acted,
    share,
    state_asked,
    texts,
    touched_words,
    untyped_parts,
    without_shown_task,
)
from critics.view import CriticView
from trajforge.text import quoted, words

NAME, VERSION = "learned_trajectory", "2"  # bump with the features or the fit
FOLDS = 5
MIN_TRAIN = 8  # anchored episodes (with both outcomes) before the critic votes at all
RIDGE = 1.0
# the critic's probability at which it calls an episode a success: above even odds, since a false
# success puts a wrong trajectory into the SFT set while a false failure only loses one sample
SUCCESS_AT = 0.7
_TOUCH = ("click", "long_press")
# Each feature with the direction its evidence may point: +1 only toward success, -1 only toward
# failure, 0 either way. The fit keeps every weight on its side (a feature whose unconstrained weight
# would cross is left out), so a pattern peculiar to the apps it was fitted on cannot turn evidence
# around on an app it has not seen.
SIGNS: dict[str, int] = {
    "claims_success": 1,
    "gives_up": -1,
    "no_end_claim": -1,
    "steps": -1,
    "no_op_share": -1,
    "repeat_share": -1,
    "unparsed_share": -1,
    "miss_share": -1,
    "away_share": -1,
    "covered_by_actions": 1,
    "covered_on_end_screen": 1,
    "covered_anywhere": 1,
    "quoted_on_end_screen": 1,
    "typed_unasked": -1,
    "typing_asked_not_done": -1,
    "last_touch_named": 1,
    "named_checked": 0,
    "named_unchecked": 0,
    "end_changed": 0,
    "claim_x_end_covered": 1,
    "claim_x_no_op": -1,
    "clauses_acted": 1,
    "last_clause_acted": 1,
    "last_touch_in_last_clause": 1,
    "acted_after_last_clause": -1,
    "ends_on_last_clause": 1,
    "claim_x_ends_on_last": 1,
    "claim_x_clauses": 1,
    "every_clause_acted": 1,
    "last_touch_unnamed": -1,
    "last_touch_role_named": 1,
    "last_touch_all_named": 1,
    "quoted_acted": 1,
    "named_untouched": -1,
    "end_named_untouched": -1,
    "named_touched": 1,
    "last_move_away": -1,
    "named_state_as_asked": 1,
    "named_state_not_as_asked": -1,
}
FEATURES = tuple(SIGNS)


def features(view: CriticView) -> list[float]:
    """The episode's observation features, in `FEATURES` order."""
    view = without_shown_task(view)
    asked = set(words(view.instruction)) - GENERIC
    values = [q.casefold().strip() for q in quoted(view.instruction)]
    steps = view.steps
    n = max(len(steps), 1)
    last = (steps[-1].action or {}) if steps else {}
    claim = last.get("kind") == "terminate" and last.get("status") == "success"
    taps = [(st.action or {}).get("kind") in _TOUCH for st in steps]
    hits = [st.touched() if tap else None for st, tap in zip(steps, taps, strict=True)]
    touched = [e for e, tap in zip(hits, taps, strict=True) if tap]  # None: a tap that hit nothing
    typed = [str((st.action or {}).get("text") or "").casefold().strip() for st in steps]
    typed = [t for t in typed if t]
    acted = {w for e in touched if e is not None for w in touched_words(e, asked)} | {
        w for t in typed for w in words(t)
    }
    end = steps[-1].elements if steps else ()
    end_words = texts(end)
    touched_texts = [e.text.casefold() for e in touched if e is not None]
    end_texts = [e.text.casefold() for e in end]
    seen: set[str] = set()
    repeats = 0
    for st in steps:
        repeats += st.before in seen
        seen.add(st.before)
    moving = [st for st in steps if (st.action or {}).get("kind") != "terminate"]
    no_op = sum(st.before == st.after for st in moving) / max(len(moving), 1)
    last_touch = next((e for e in reversed(touched) if e is not None), None)
    touch = touched_words(last_touch, asked) - GENERIC if last_touch is not None else set()
    named = [e for e in end if e.checked is not None and set(words(e.text)) & asked]
    end_covered = share(end_words, asked)
    parts = clauses(view.instruction)
    essential = frozenset(w for v in values for w in words(v))
    per_action = [touched_words(e, asked) if e is not None else set() for e in hits]
    per_action = [
        w | set(words(str((st.action or {}).get("text") or "")))
        for w, st in zip(per_action, steps, strict=True)
    ]
    done_at = next(
        (i for i, w in enumerate(per_action) if parts and part_acted(parts[-1], w, essential)), None
    )
    last_hit = max((i for i, w in enumerate(per_action) if parts and w & parts[-1]), default=None)
    moved = [i for i, st in enumerate(moving) if st.before != st.after]
    commits = {i for i, e in enumerate(hits) if e is not None and is_commit(e)}
    after_last = sum(i > last_hit and i not in commits for i in moved) if last_hit is not None else len(moved)
    ends_on_last = float(
        bool(parts) and part_acted(parts[-1], acted, essential) and last_hit is not None and not after_last
    )
    task = view.instruction.casefold()
    shown = {nm for st in steps for e in st.elements if (nm := name_in_task(e, task, asked))}
    hit = {nm for e in touched if e is not None and (nm := name_in_task(e, task, asked))}
    hit |= {name for name in shown if any(name in t for t in typed)}
    end_named = {nm for e in end if (nm := name_in_task(e, task, asked))}
    raw_parts = clause_texts(task)  # the same parts as `parts`, as text
    states = [
        (e.checked, state_asked(nm, raw_parts))
        for e in end
        if e.checked is not None and (nm := name_in_task(e, task, asked))
    ]
    # a part is done when half its words were acted on, or a thing it names was tapped or typed
    done = [
        part_acted(part, acted, essential) or any(name.strip("<>") in raw for name in hit)
        for raw, part in zip(raw_parts, parts, strict=True)
    ]
    clauses_acted = sum(done) / len(done) if done else 0.0
    row = {
        "claims_success": float(claim),
        "gives_up": float(last.get("kind") == "terminate" and not claim),
        "no_end_claim": float(last.get("kind") != "terminate"),
        "steps": len(steps) / 30,
        "no_op_share": no_op,
        "repeat_share": repeats / n,
        "unparsed_share": sum(st.action is None for st in steps) / n,
        "miss_share": sum(e is None for e in touched) / max(len(touched), 1),
        "away_share": sum(goes_away(st.action) for st in steps) / n,
        "covered_by_actions": share(acted, asked),
        "covered_on_end_screen": end_covered,
        "covered_anywhere": share({w for st in steps for w in texts(st.elements)} | acted, asked),
        "quoted_on_end_screen": (
            sum(any(v in t for t in end_texts) for v in values) / len(values) if values else 0.0
        ),
        "typing_asked_not_done": untyped_parts(parts, {w for t in typed for w in words(t)}),
        "typed_unasked": sum(t not in task for t in typed) / max(len(typed), 1),
        "last_touch_named": share(asked, touch) if touch else 0.0,
        "named_checked": sum(bool(e.checked) for e in named) / max(len(named), 1),
        "named_unchecked": sum(e.checked is False for e in named) / max(len(named), 1),
        "end_changed": float(bool(steps) and steps[-1].before != steps[-1].after),
        "claim_x_end_covered": float(claim) * end_covered,
        "claim_x_no_op": float(claim) * no_op,
        "clauses_acted": clauses_acted,
        "last_clause_acted": float(done_at is not None),
        "last_touch_in_last_clause": float(bool(parts) and bool(touch & parts[-1])),
        "acted_after_last_clause": min(after_last, 10) / 10,
        "ends_on_last_clause": ends_on_last,
        "claim_x_ends_on_last": float(claim) * ends_on_last,
        "claim_x_clauses": float(claim) * clauses_acted,
        "every_clause_acted": float(bool(done) and all(done)),
        "last_touch_all_named": float(bool(touch) and touch <= asked),
        "quoted_acted": (
            sum(v in typed or any(v in t for t in touched_texts) for v in values) / len(values)
            if values
            else 0.0
        ),
        "last_touch_role_named": float(
            last_touch is not None and bool(ROLE_WORDS.get(last_touch.role, set()) & asked)
        ),
        "named_untouched": len(shown - hit) / max(len(shown), 1),
        "end_named_untouched": len(end_named - hit) / max(len(end_named), 1),
        "named_touched": len(hit) / max(len(shown), 1),
        "last_move_away": float(bool(moved) and goes_away(moving[moved[-1]].action)),
        "named_state_as_asked": sum(c == want for c, want in states) / max(len(states), 1),
        "named_state_not_as_asked": sum(c != want for c, want in states) / max(len(states), 1),
        "last_touch_unnamed": float(
            last_touch is not None and bool(touch) and not touch & asked and not is_commit(last_touch)
        ),
    }
    return [row[f] for f in FEATURES]


@dataclass(frozen=True)
class Checkpoint:
    """A fitted critic: standardisation, weights and what it was trained on (stored as JSON)."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    trained_on: int
    positives: int

    @property
    def version(self) -> str:
        return hashlib.sha256(self.to_json()).hexdigest()[:12]

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Checkpoint:
        raw = json.loads(data)
        return cls(
            tuple(raw["features"]),
            tuple(raw["mean"]),
            tuple(raw["scale"]),
            tuple(raw["weights"]),
            float(raw["bias"]),
            int(raw["trained_on"]),
            int(raw["positives"]),
        )

    def prob(self, x: np.ndarray) -> np.ndarray:
        z = (x - np.array(self.mean)) / np.array(self.scale)
        return 1 / (1 + np.exp(-(z @ np.array(self.weights) + self.bias)))


def _newton(z: np.ndarray, y: np.ndarray, ridge: float) -> np.ndarray:
    """Ridge logistic regression on `z` (last column: the bias, not shrunk) by Newton's method."""
    w = np.zeros(z.shape[1])
    penalty = np.eye(z.shape[1]) * ridge
    penalty[-1, -1] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-(z @ w)))
        grad = z.T @ (p - y) + penalty @ w
        hess = (z * (p * (1 - p))[:, None]).T @ z + penalty
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def fit(x: np.ndarray, y: np.ndarray, ridge: float = RIDGE) -> Checkpoint | None:
    """Sign-constrained ridge logistic regression (`SIGNS`); None with too few anchors or one outcome.

    Features whose weight would cross its sign are left out one at a time, the worst first, and the
    rest refitted, until every weight is on its side."""
    if len(y) < MIN_TRAIN or y.min() == y.max():
        return None
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    signs = np.array([SIGNS[f] for f in FEATURES] + [0], dtype=float)
    active = list(range(z.shape[1]))
    while True:
        w_active = _newton(z[:, active], y, ridge)
        crossed = signs[active] * w_active
        if crossed.min() >= 0:
            break
        active.pop(int(np.argmin(crossed)))
    w = np.zeros(z.shape[1])
    w[active] = w_active
    return Checkpoint(
        FEATURES,
        tuple(float(v) for v in mean),
        tuple(float(v) for v in scale),
        tuple(float(v) for v in w[:-1]),
        float(w[-1]),
        len(y),
        int(y.sum()),
    )


def fold_of(group: str, folds: int = FOLDS) -> int:
    return int(hashlib.sha256(group.encode()).hexdigest()[:8], 16) % folds


@dataclass(frozen=True)
class Prediction:
    success: bool | None  # None: no model could be fitted without this episode's query
    probability: float | None
    checkpoint: Checkpoint | None = field(default=None, compare=False, repr=False)  # the model that judged

    @property
    def model(self) -> str:
        """The version of the checkpoint that judged it, "" when none could be fitted."""
        return self.checkpoint.version if self.checkpoint is not None else ""


def cross_judge(
    train: Sequence[tuple[str, list[float], bool]],
    targets: Sequence[tuple[str, list[float]]],
    folds: int = FOLDS,
) -> list[Prediction]:
    """Every target (query uid, features) judged by a model fitted on the anchored episodes
    (`train`: query uid, features, success) of the other folds of queries: never its own query."""
    out: list[Prediction | None] = [None] * len(targets)
    for fold in range(folds):
        mine = [i for i, (group, _) in enumerate(targets) if fold_of(group, folds) == fold]
        if not mine:
            continue
        rows = [(x, y) for group, x, y in train if fold_of(group, folds) != fold]
        model = fit(np.array([x for x, _ in rows]), np.array([float(y) for _, y in rows])) if rows else None
        if model is None:
            for i in mine:
                out[i] = Prediction(None, None)
            continue
        probs = model.prob(np.array([targets[i][1] for i in mine]))
        for i, p in zip(mine, probs, strict=True):
            out[i] = Prediction(bool(p >= SUCCESS_AT), float(p), model)
    return [p or Prediction(None, None) for p in out]


def fit_all(train: Sequence[tuple[str, list[float], bool]]) -> Checkpoint | None:
    """The checkpoint of a round: fitted on every anchored episode so far."""
    if not train:
        return None
    return fit(np.array([x for _, x, _ in train]), np.array([float(y) for _, _, y in train]))
