"""An offline trajectory critic that learns from the anchors (UI-Genie's reward model, GUI-Critic-R1's
idea, sized for a CPU).

It reads only a `CriticView` (the instruction, screenshots by hash, the element trees as the
device reported them, the actions), turns an episode into observation features, and fits a
ridge-regularised logistic regression on anchored episodes (a verifier's or a human's
verdict). The features (`critics.episode_features`) name no app, widget or task, so a critic
trained on some apps judges others; each feature's weight is held to the side its evidence
points (`SIGNS`).

A checkpoint has three parts:
- the shared model, fitted on the home's anchored episodes;
- each app's own correction, where the app has `MIN_TRAIN` anchored episodes: a small
  unconstrained model fitted on that app's episodes alone, with the shared model's log-odds as
  its offset and shrunk toward nothing, for what only that app's episodes show (which tapped box
  ends the task, what a repeat means there);
- the model for an app the home has not anchored at all (`unseen`): the shared model fitted
  again with the prior's episodes of other environments beside the home's (`critics.prior`),
  so a new app is judged by what success looked like on many others, not on a few.

`cross_judge` gives every episode a verdict from a model that never saw an episode of its query
(k folds by query), so its measured accuracy is out of sample by construction. It calls an episode
a success at `SUCCESS_AT`, above even odds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from critics.episode_features import SIGNS
from trajforge.procs import one_blas_thread

NAME, VERSION = "learned_trajectory", "3"  # bump with the features or the fit
FOLDS = 5
MIN_TRAIN = 8  # anchored episodes (with both outcomes) before the critic votes at all
RIDGE = 1.0
CORRECTION_RIDGE = 3.0  # an app's own correction is shrunk this hard toward the shared model
# the critic's probability at which it calls an episode a success: above even odds, since a false
# success puts a wrong trajectory into the SFT set while a false failure only loses one sample
SUCCESS_AT = 0.7


@dataclass(frozen=True)
class TrainRow:
    """One training row: an anchored episode's features and verdict, of `app`. A row of the prior
    (`query` None) trains every fold and is never judged."""

    query: str | None
    app: str
    x: list[float]
    success: bool


@dataclass(frozen=True)
class Correction:
    """An app's own model, added to the shared model's log-odds: standardisation and weights, the
    last one its bias."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]

    def logit(self, x: np.ndarray) -> np.ndarray:
        z = (x - np.array(self.mean)) / np.array(self.scale)
        return np.asarray(z @ np.array(self.weights[:-1]) + self.weights[-1])


@dataclass(frozen=True)
class Checkpoint:
    """A fitted critic: standardisation, weights and what it was trained on, with each app's own
    correction where it had enough anchored episodes (stored as JSON)."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    trained_on: int
    positives: int
    apps: dict[str, Correction] = field(default_factory=dict)
    anchored_apps: tuple[str, ...] = ()  # the apps of the home's rows (corrected or not)
    unseen: Checkpoint | None = None  # for any other app: fitted with the prior as well

    @property
    def version(self) -> str:
        return hashlib.sha256(self.to_json()).hexdigest()[:12]

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Checkpoint:
        return cls._from(json.loads(data))

    @classmethod
    def _from(cls, raw: dict[str, Any]) -> Checkpoint:
        apps: dict[str, Any] = raw.get("apps", {})
        return cls(
            tuple(raw["features"]),
            tuple(raw["mean"]),
            tuple(raw["scale"]),
            tuple(raw["weights"]),
            float(raw["bias"]),
            int(raw["trained_on"]),
            int(raw["positives"]),
            {
                app: Correction(tuple(c["mean"]), tuple(c["scale"]), tuple(c["weights"]))
                for app, c in apps.items()
            },
            tuple(raw.get("anchored_apps", ())),
            cls._from(raw["unseen"]) if raw.get("unseen") else None,
        )

    def prob(self, x: np.ndarray, app: str | None = None) -> np.ndarray:
        """The probability of success of each row of `x`, episodes of `app`: the shared model with the
        app's correction where it has one, or the `unseen` model for an app the home never anchored."""
        if app is not None and app not in self.anchored_apps and self.unseen is not None:
            return self.unseen.prob(x)
        z = (x - np.array(self.mean)) / np.array(self.scale)
        logit = z @ np.array(self.weights) + self.bias
        if app is not None and app in self.apps:
            logit = logit + self.apps[app].logit(x)
        return np.asarray(1 / (1 + np.exp(-logit)))


def _newton(
    z: np.ndarray,
    y: np.ndarray,
    ridge: float,
    offset: np.ndarray | None = None,
    shrink_bias: bool = False,
) -> np.ndarray:
    """Ridge logistic regression on `z` (last column: the bias, shrunk only with `shrink_bias`) by
    Newton's method; `offset` is added to each row's log-odds."""
    offset = np.zeros(len(y)) if offset is None else offset
    w = np.zeros(z.shape[1])
    penalty = np.eye(z.shape[1]) * ridge
    if not shrink_bias:
        penalty[-1, -1] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-(z @ w + offset)))
        grad = z.T @ (p - y) + penalty @ w
        hess = (z * (p * (1 - p))[:, None]).T @ z + penalty
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def _standardised(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z with a bias column, mean, scale)."""
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    return np.hstack([(x - mean) / scale, np.ones((len(x), 1))]), mean, scale


def fit(
    x: np.ndarray, y: np.ndarray, ridge: float = RIDGE, signs: Mapping[str, int] = SIGNS
) -> Checkpoint | None:
    """Sign-constrained ridge logistic regression: `x`'s columns are `signs`' features, each weight held
    to its sign; None with too few anchors or one outcome.

    Features whose weight would cross its sign are left out one at a time, the worst first, and the
    rest refitted, until every weight is on its side."""
    if len(y) < MIN_TRAIN or y.min() == y.max():
        return None
    if x.shape[1] != len(signs):
        raise ValueError(f"fit: x has {x.shape[1]} columns but {len(signs)} signs; give one sign per column")
    z, mean, scale = _standardised(x)
    sign = np.array([*signs.values(), 0], dtype=float)
    active = list(range(z.shape[1]))
    with one_blas_thread():  # thin matrices: see its docstring
        while True:
            w_active = _newton(z[:, active], y, ridge)
            crossed = sign[active] * w_active
            if crossed.min() >= 0:
                break
            active.pop(int(np.argmin(crossed)))
    w = np.zeros(z.shape[1])
    w[active] = w_active
    return Checkpoint(
        tuple(signs),
        tuple(float(v) for v in mean),
        tuple(float(v) for v in scale),
        tuple(float(v) for v in w[:-1]),
        float(w[-1]),
        len(y),
        int(y.sum()),
    )


def _correction(shared: Checkpoint, x: np.ndarray, y: np.ndarray) -> Correction:
    """An app's own correction to `shared`, fitted on the app's rows with the shared log-odds as offset."""
    p = np.clip(shared.prob(x), 1e-9, 1 - 1e-9)
    z, mean, scale = _standardised(x)
    with one_blas_thread():  # thin matrices: see its docstring
        w = _newton(z, y, CORRECTION_RIDGE, offset=np.log(p / (1 - p)), shrink_bias=True)
    return Correction(
        tuple(float(v) for v in mean), tuple(float(v) for v in scale), tuple(float(v) for v in w)
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
    train: Sequence[TrainRow], targets: Sequence[tuple[str, str, list[float]]], folds: int = FOLDS
) -> list[Prediction]:
    """Every target (query uid, app, features) judged by a model fitted on the anchored rows of the
    other folds of queries (and the prior's rows): never on its own query."""
    out: list[Prediction | None] = [None] * len(targets)
    for fold in range(folds):
        mine = [i for i, (group, _, _) in enumerate(targets) if fold_of(group, folds) == fold]
        if not mine:
            continue
        model = fit_all([r for r in train if r.query is None or fold_of(r.query, folds) != fold])
        for i in mine:
            _, app, x = targets[i]
            p = float(model.prob(np.array([x]), app)[0]) if model is not None else None
            out[i] = Prediction(p >= SUCCESS_AT, p, model) if p is not None else Prediction(None, None)
    return [p or Prediction(None, None) for p in out]


def _fit_rows(rows: Sequence[TrainRow]) -> Checkpoint | None:
    return fit(np.array([r.x for r in rows]), np.array([float(r.success) for r in rows]))


def fit_all(train: Sequence[TrainRow]) -> Checkpoint | None:
    """The shared model fitted on the home's rows, each app's correction fitted on its own rows where it
    has `MIN_TRAIN`, and, with prior rows in `train`, the `unseen` model fitted on them all for the
    apps with no row. None until the home's own rows number `MIN_TRAIN` with both outcomes: the
    critic abstains until the home has anchors of its own."""
    own = [r for r in train if r.query is not None]
    shared = _fit_rows(own)
    if shared is None:
        return None
    apps: dict[str, Correction] = {}
    for app in sorted({r.app for r in own}):
        rows = [r for r in own if r.app == app]
        if len(rows) >= MIN_TRAIN:
            apps[app] = _correction(
                shared, np.array([r.x for r in rows]), np.array([float(r.success) for r in rows])
            )
    unseen = _fit_rows(train) if len(train) > len(own) else None
    return replace(shared, apps=apps, anchored_apps=tuple(sorted({r.app for r in own})), unseen=unseen)
